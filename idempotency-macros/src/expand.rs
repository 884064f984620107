//! The expansion: the function keeps its signature; its body becomes one call into
//! the function runtime ([`crate::krate::runtime`]), with the original body as an `async move` block.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ItemFn;
use syn::spanned::Spanned;

use crate::attr::{Args, OnError};
use crate::check::FnInfo;
use crate::shared::{KEY_HINT, call_builder, map_err, required, with_body};

/// Expands `#[idempotent(args)] item`.
pub(crate) fn expand(args: Args, item: ItemFn) -> syn::Result<TokenStream> {
    let info = FnInfo::of(&item.sig)?;
    if args.transition.is_some() {
        return crate::state::expand(args, item, info);
    }
    if args.tx.is_some() {
        return crate::tx::expand(args, item, info);
    }
    dedup(args, item, info)
}

/// Dedup mode: claim the key in the store, run the body once, store `Ok(T)`.
fn dedup(args: Args, item: ItemFn, info: FnInfo) -> syn::Result<TokenStream> {
    let runtime = crate::krate::runtime();
    reject_state_args(&args)?;
    let key = required(args.key.as_ref(), "key", KEY_HINT)?;
    let store = required(args.store.as_ref(), "store", STORE_HINT)?;
    info.check_root(key, "key")?;
    info.check_root(store, "store")?;
    let call = call_builder(&args, &info, key)?;

    let engine_var = format_ident!("__idempotency_engine", span = Span::mixed_site());
    let call_var = format_ident!("__idempotency_call", span = Span::mixed_site());
    let runner = match args.on_error {
        Some((OnError::Keep, _)) => quote!(run_keeping_errors),
        _ => quote!(run),
    };
    let output = &info.output;
    let map_err = map_err(&args, output);
    let engine = quote_spanned!(store.span()=> (#store).idempotency_engine());
    Ok(with_body(item, |block| {
        quote! {
            let #call_var = #call;
            let #engine_var = {
                use #runtime::AsEngine as _;
                #engine
            };
            #runtime::#runner::<#output, _, _, _>(
                #engine_var,
                #call_var,
                #map_err,
                async move #block,
            )
            .await
        }
    }))
}

/// The hint for a missing `store = …` in the dedup mode (the engine).
const STORE_HINT: &str = "name the engine, e.g. `store = self.engine` or `store = state.idempotency` \
     (an `idempotency_core::Idempotency` or an `Arc` of a store)";

/// Arguments of the state-machine mode are refused elsewhere.
fn reject_state_args(args: &Args) -> syn::Result<()> {
    if let Some(executor) = &args.executor {
        return Err(syn::Error::new(
            executor.span(),
            "`executor` belongs to the state-machine mode: add `transition(…)`, or remove it",
        ));
    }
    if let Some(already) = &args.already {
        return Err(syn::Error::new(
            already.span(),
            "`already` belongs to the state-machine mode: add `transition(…)`, or remove it",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use quote::quote;

    /// The expansion `cargo expand` shows for a method: the signature unchanged, one `Call`
    /// builder, the engine, and the body as the `async move` block of `run`.
    #[test]
    fn dedup_expansion_is_one_call_of_run() {
        let args = syn::parse2(quote!(
            key = event.trade_no,
            store = self.engine,
            ttl = "1h",
            fingerprint = [event.amount]
        ))
        .unwrap();
        let item = syn::parse2(quote! {
            #[doc = "kept"]
            pub(crate) async fn handle<T: Send>(&self, event: Event, extra: T) -> Result<u64, AppError> where T: Sync {
                Ok(event.amount)
            }
        })
        .unwrap();
        let expanded = super::expand(args, item).unwrap().to_string();
        for part in [
            "# [doc = \"kept\"] pub (crate) async fn handle < T : Send > (& self , event : Event , extra : T) -> Result < u64 , AppError > where T : Sync {",
            ":: idempotency_function :: Call :: new (:: core :: concat ! (:: core :: module_path ! () , \"::\" , \"handle\") , & (event . trade_no))",
            ". ttl (:: core :: time :: Duration :: from_millis (3600000u64))",
            ". fingerprint (\"event . amount\" , & (event . amount))",
            "(self . engine) . idempotency_engine ()",
            "{ use :: idempotency_function :: AsEngine as _ ;",
            ":: idempotency_function :: run :: < Result < u64 , AppError > , _ , _ , _ > (",
            ":: core :: convert :: From :: from , async move { Ok (event . amount) } ,) . await",
        ] {
            assert!(expanded.contains(part), "{part}\n--- in ---\n{expanded}");
        }
    }

    #[test]
    fn async_trait_methods_get_a_pointed_message() {
        let args = syn::parse2(quote!(key = id, store = self.engine)).unwrap();
        let item = syn::parse2(quote! {
            fn get<'life0, 'async_trait>(&'life0 self, id: u64)
                -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u64, E>> + Send + 'async_trait>>
            { Box::pin(async move { Ok(id) }) }
        })
        .unwrap();
        let error = super::expand(args, item).unwrap_err().to_string();
        assert!(error.contains("inherent `async fn`"), "{error}");
    }
}
