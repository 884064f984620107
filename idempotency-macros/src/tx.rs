//! Transactional mode (`tx = …`): the dedup record is claimed and completed in the caller's
//! `sqlx::Transaction`, so it commits or rolls back with the body's writes.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::ItemFn;

use crate::attr::{Args, OnError};
use crate::check::FnInfo;
use crate::shared::{KEY_HINT, call_builder, map_err, required, with_body};

const STORE_HINT: &str = "name the SQL store the record is written by, e.g. `store = self.store` \
     (a `PostgresStore`, `SqliteStore` or `MySqlStore` on the transaction's database)";

/// Expands the transactional mode.
pub(crate) fn expand(args: Args, item: ItemFn, info: FnInfo) -> syn::Result<TokenStream> {
    let sql = crate::krate::sql_runtime();
    reject(&args)?;
    let tx = required(
        args.tx.as_ref(),
        "tx",
        "name the transaction argument, e.g. `tx = tx`",
    )?;
    let key = required(args.key.as_ref(), "key", KEY_HINT)?;
    let store = required(args.store.as_ref(), "store", STORE_HINT)?;
    info.check_root(tx, "tx")?;
    info.check_root(key, "key")?;
    info.check_root(store, "store")?;
    let call = call_builder(&args, &info, key)?;
    let map_err = map_err(&args, &info.output);

    let var = |name: &str| format_ident!("__idempotency_{}", name, span = Span::mixed_site());
    let (call_var, run, lease, result) = (var("call"), var("run"), var("lease"), var("result"));
    let output = &info.output;
    Ok(with_body(item, |block| {
        quote! {
            let #call_var = #call;
            let mut #run = {
                use #sql::function::AsTxStore as _;
                #sql::function::TxRun::<#output, _, _>::new(
                    (#store).idempotency_tx_store(),
                    #call_var,
                    #map_err,
                )
            };
            let #lease = match #run.begin(&mut *(#tx)).await {
                ::core::result::Result::Ok(lease) => lease,
                ::core::result::Result::Err(answer) => return answer,
            };
            let #result = #run.body(async #block).await;
            #run.finish(&mut *(#tx), #lease, #result).await
        }
    }))
}

/// Arguments that mean nothing here, each refused on its own span with what to do instead.
fn reject(args: &Args) -> syn::Result<()> {
    let settings = [("ttl", &args.ttl), ("lease", &args.lease)];
    for (name, value) in settings {
        if let Some(value) = value {
            return Err(syn::Error::new(
                value.span,
                format!(
                    "with `tx = …` the {name} is the store's: set it with \
                     `.with_tx_{name}(…)` on the SQL store, and remove `{name}` here"
                ),
            ));
        }
    }
    if let Some(wait) = &args.wait {
        return Err(syn::Error::new(
            wait.span,
            "with `tx = …` a duplicate already waits for the first transaction (row lock); \
             remove `wait`",
        ));
    }
    if let Some((OnError::Keep, span)) = args.on_error {
        return Err(syn::Error::new(
            span,
            "with `tx = …` an `Err` releases the claim in the transaction; to keep a final \
             answer, return it as `Ok` (e.g. `Ok(Declined)`), or remove `on_error`",
        ));
    }
    for (name, present) in [
        ("executor", args.executor.is_some()),
        ("already", args.already.is_some()),
    ] {
        if present {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("`{name}` belongs to the state-machine mode (`transition(…)`); remove it"),
            ));
        }
    }
    Ok(())
}
