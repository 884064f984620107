//! placeholder
use crate::attr::Args;
use crate::check::FnInfo;
use proc_macro2::TokenStream;
use syn::ItemFn;
pub(crate) fn expand(args: Args, item: ItemFn, _info: FnInfo) -> syn::Result<TokenStream> {
    let span = args.transition.map_or(item.sig.ident.span(), |t| t.span);
    Err(syn::Error::new(span, "the state-machine mode is not available yet"))
}
