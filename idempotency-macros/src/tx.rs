//! placeholder
use crate::attr::Args;
use crate::check::FnInfo;
use proc_macro2::TokenStream;
use syn::ItemFn;
pub(crate) fn expand(_args: Args, item: ItemFn, _info: FnInfo) -> syn::Result<TokenStream> {
    Err(syn::Error::new(item.sig.ident.span(), "the transactional mode is not available yet"))
}
