//! The paths the generated code names the runtime by.

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::quote;

/// The runtime of idempotent functions: `::idempotency::function` when the calling crate
/// depends on the facade (under whatever name it gave it), else `::idempotency_function`, so
/// depending on the facade alone is enough.
pub(crate) fn runtime() -> TokenStream {
    first_of(&["idempotency", "idempotency-function"], &["function"])
        .unwrap_or(quote!(::idempotency_function))
}

/// The SQL runtime of the transactional and state-machine modes: `::idempotency::sql` when the
/// calling crate depends on the facade, else `::idempotency_sql`.
pub(crate) fn sql_runtime() -> TokenStream {
    first_of(&["idempotency", "idempotency-sql"], &["sql"]).unwrap_or(quote!(::idempotency_sql))
}

/// The path of the first of `packages` the caller depends on, followed by `facade_module` when
/// that package is the facade (`idempotency`).
fn first_of(packages: &[&str], facade_module: &[&str]) -> Option<TokenStream> {
    for package in packages {
        let name = match crate_name(package) {
            Ok(FoundCrate::Name(name)) => name,
            // The package's own tests and doctests: they name it from outside.
            Ok(FoundCrate::Itself) => package.replace('-', "_"),
            Err(_) => continue,
        };
        let name = syn::Ident::new(&name, Span::call_site());
        let modules = if *package == "idempotency" {
            facade_module
                .iter()
                .map(|module| syn::Ident::new(module, Span::call_site()))
                .collect()
        } else {
            Vec::new()
        };
        return Some(quote!(::#name #(::#modules)*));
    }
    None
}
