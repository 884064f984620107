//! The path the generated code names the runtime by.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::quote;

/// `::idempotency` when the calling crate depends on the facade (under whatever name it gave
/// it), else `::idempotency_core`: the generated code reaches `function` and `sql` through
/// whichever of the two the caller has, so depending on the facade alone is enough.
pub(crate) fn runtime() -> TokenStream {
    for package in ["idempotency", "idempotency-core"] {
        match crate_name(package) {
            Ok(FoundCrate::Name(name)) => {
                let name = syn::Ident::new(&name, Span::call_site());
                return quote!(::#name);
            }
            // The package's own tests and doctests: they name it from outside.
            Ok(FoundCrate::Itself) => {
                let name = syn::Ident::new(&package.replace('-', "_"), Span::call_site());
                return quote!(::#name);
            }
            Err(_) => {}
        }
    }
    quote!(::idempotency_core)
}
