//! The pieces every mode's expansion shares: the error for a missing argument, the
//! `Call` builder of the dedup and transactional modes, and the `map_err` and the rewrapped
//! function of all three.
//! The mode modules (`expand`, `state`, `tx`) import from here, never from each other.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Block, Expr, ItemFn};

use crate::attr::{Args, DurationArg};
use crate::check::FnInfo;

/// The hint for a missing `key = …`, shared by the dedup and transactional modes.
pub(crate) const KEY_HINT: &str = "name the idempotency key with an expression over the \
     arguments, e.g. `key = event.trade_no`";

/// The argument, or an error on the attribute saying what to add.
pub(crate) fn required<'a, T>(value: Option<&'a T>, name: &str, hint: &str) -> syn::Result<&'a T> {
    value.ok_or_else(|| {
        syn::Error::new(
            Span::call_site(),
            format!("`#[idempotent]` is missing `{name} = …`: {hint}"),
        )
    })
}

/// `Call::new(namespace, &(key)).principal(..).ttl(..).lease(..).wait(..).fingerprint(..)…`
pub(crate) fn call_builder(args: &Args, info: &FnInfo, key: &Expr) -> syn::Result<TokenStream> {
    let runtime = crate::krate::runtime();
    let namespace = namespace(args, info);
    let mut call = quote!(#runtime::Call::new(#namespace, &(#key)));
    if let Some(principal) = &args.principal {
        info.check_root(principal, "principal")?;
        call.extend(quote!(.principal(&(#principal))));
    }
    for (name, value) in [
        ("ttl", &args.ttl),
        ("lease", &args.lease),
        ("wait", &args.wait),
    ] {
        if let Some(DurationArg { millis, span }) = value {
            let method = format_ident!("{name}", span = *span);
            call.extend(quote!(.#method(::core::time::Duration::from_millis(#millis))));
        }
    }
    for part in args.fingerprint.iter().flatten() {
        info.check_root(part, "fingerprint")?;
        let name = part.to_token_stream().to_string();
        call.extend(quote_spanned!(part.span()=> .fingerprint(#name, &(#part))));
    }
    Ok(call)
}

/// The `namespace = "…"`, or `module_path!()::fn_name`.
pub(crate) fn namespace(args: &Args, info: &FnInfo) -> TokenStream {
    match &args.namespace {
        Some(namespace) => namespace.to_token_stream(),
        None => {
            let name = info.name.to_string();
            quote!(::core::concat!(::core::module_path!(), "::", #name))
        }
    }
}

/// `map_err = path`, or `From::from`, spanned on the return type so that a missing
/// `From<Error>` is reported there.
pub(crate) fn map_err(args: &Args, output: &syn::Type) -> TokenStream {
    match &args.map_err {
        Some(map_err) => map_err.to_token_stream(),
        None => quote_spanned!(output.span()=> ::core::convert::From::from),
    }
}

/// The function `item` again, with its attributes, visibility and signature, and the body
/// `body` builds around its original block: what every mode expands to.
pub(crate) fn with_body(item: ItemFn, body: impl FnOnce(Box<Block>) -> TokenStream) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = item;
    let body = body(block);
    quote! {
        #(#attrs)*
        #vis #sig {
            #body
        }
    }
}
