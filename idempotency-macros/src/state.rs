//! State-machine mode (`transition(…)`): the body runs only when the row's state moves
//! `from → to`; a row already in the target state answers `Ok(already)` without running it.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ItemFn, Lit, LitStr};

use crate::attr::{Args, Transition};
use crate::check::FnInfo;
use crate::shared::{map_err, with_body};

const TRANSITION_HINT: &str = "write transition(table = \"orders\", id = order_id, \
     from = \"WAIT_PAY\", to = \"PAID\") (optional: column = \"status\", id_column = \"id\")";

/// Expands the state-machine mode.
pub(crate) fn expand(args: Args, item: ItemFn, info: FnInfo) -> syn::Result<TokenStream> {
    let sql = crate::krate::sql_runtime();
    reject(&args)?;
    let Some(transition) = &args.transition else {
        return Err(syn::Error::new(Span::call_site(), TRANSITION_HINT));
    };
    let executor = match (&args.executor, &args.tx) {
        (Some(executor), None) | (None, Some(executor)) => executor,
        (Some(_), Some(tx)) => {
            return Err(syn::Error::new(
                tx.span(),
                "give the transaction once: `executor = tx` (remove `tx = …`)",
            ));
        }
        (None, None) => {
            return Err(syn::Error::new(
                transition.span,
                "the transition needs a transaction: add `executor = tx`, with `tx: &mut \
                 sqlx::Transaction<'_, DB>` an argument the body also writes its side effects to",
            ));
        }
    };
    info.check_root(executor, "executor")?;
    let Transition {
        span,
        table,
        id,
        id_column,
        column,
        from,
        to,
    } = transition;
    let missing = |name: &str| {
        syn::Error::new(
            *span,
            format!("the transition is missing `{name} = …`: {TRANSITION_HINT}"),
        )
    };
    let table = identifier(table.as_ref().ok_or_else(|| missing("table"))?)?;
    let id = id.as_ref().ok_or_else(|| missing("id"))?;
    info.check_root(id, "transition id")?;
    let id_column = match id_column {
        Some(name) => identifier(name)?,
        None => quote!("id"),
    };
    let column = match column {
        Some(name) => identifier(name)?,
        None => quote!("status"),
    };
    let from = from.as_ref().ok_or_else(|| missing("from"))?;
    if from.is_empty() {
        return Err(missing("from"));
    }
    let to = to.as_ref().ok_or_else(|| missing("to"))?;
    let coded = matches!(to, Lit::Int(_));
    if let Some(other) = from
        .iter()
        .find(|state| matches!(state, Lit::Int(_)) != coded)
    {
        return Err(syn::Error::new(
            other.span(),
            "the states are all strings or all integers, not both",
        ));
    }
    let from = from
        .iter()
        .map(state_value)
        .collect::<syn::Result<Vec<_>>>()?;
    let to = state_value(to)?;
    let already = match &args.already {
        Some(already) => already.to_token_stream(),
        None => quote!(::core::default::Default::default()),
    };
    let map_err = map_err(&args, &info.output);

    let answer = format_ident!("__idempotency_answer", span = Span::mixed_site());
    let executor = quote_spanned!(executor.span()=> &mut *(#executor));
    let output = &info.output;
    Ok(with_body(item, |block| {
        quote! {
            if let ::core::option::Option::Some(#answer) =
                #sql::function::apply::<#output, _, _, _, _>(
                    #executor,
                    #sql::function::transition(
                        #table, #id_column, #column, &[#(#from),*], #to,
                    ),
                    &(#id),
                    || #already,
                    #map_err,
                )
                .await
            {
                return #answer;
            }
            #block
        }
    }))
}

/// A state literal as a `StateValue` expression: `"PAID"` → text, `20` → an `i64` code.
fn state_value(state: &Lit) -> syn::Result<TokenStream> {
    let sql = crate::krate::sql_runtime();
    match state {
        Lit::Int(code) => {
            let code: i64 = code.base10_parse()?;
            Ok(quote!(#sql::StateValue::Code(#code)))
        }
        other => Ok(quote!(#sql::StateValue::from(#other))),
    }
}

/// A table or column name, checked as the SQL helper checks it (letters, digits, `_`).
fn identifier(name: &LitStr) -> syn::Result<TokenStream> {
    let text = name.value();
    let mut chars = text.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && text.len() <= 63;
    if valid {
        Ok(name.to_token_stream())
    } else {
        Err(syn::Error::new(
            name.span(),
            format!(
                "{text:?} is not a plain SQL identifier: use letters, digits and `_` (not \
                 starting with a digit, at most 63 characters)"
            ),
        ))
    }
}

/// Dedup arguments mean nothing here: the row's state is the record.
fn reject(args: &Args) -> syn::Result<()> {
    let dedup = [
        ("key", args.key.as_ref().map(Spanned::span)),
        ("store", args.store.as_ref().map(Spanned::span)),
        ("principal", args.principal.as_ref().map(Spanned::span)),
        ("namespace", args.namespace.as_ref().map(LitStr::span)),
        ("ttl", args.ttl.as_ref().map(|d| d.span)),
        ("lease", args.lease.as_ref().map(|d| d.span)),
        ("wait", args.wait.as_ref().map(|d| d.span)),
        ("on_error", args.on_error.map(|(_, span)| span)),
    ];
    for (name, span) in dedup {
        if let Some(span) = span {
            return Err(syn::Error::new(
                span,
                format!(
                    "`{name}` belongs to the dedup mode; with `transition(…)` the row's state is \
                     the record: remove `{name}`"
                ),
            ));
        }
    }
    if let Some(fingerprint) = args.fingerprint.as_ref().and_then(|list| list.first()) {
        return Err(syn::Error::new(
            fingerprint.span(),
            "`fingerprint` belongs to the dedup mode; with `transition(…)` the row's state is \
             the record: remove it",
        ));
    }
    Ok(())
}
