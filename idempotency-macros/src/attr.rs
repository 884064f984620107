//! The attribute's arguments: `#[idempotent(key = …, store = …, ttl = "24h", …)]`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Lit, LitStr, Token, bracketed, parenthesized};

use crate::duration::parse_duration;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(store);
    syn::custom_keyword!(engine);
    syn::custom_keyword!(namespace);
    syn::custom_keyword!(scope);
    syn::custom_keyword!(principal);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(fingerprint);
    syn::custom_keyword!(on_error);
    syn::custom_keyword!(map_err);
    syn::custom_keyword!(tx);
    syn::custom_keyword!(transition);
    syn::custom_keyword!(executor);
    syn::custom_keyword!(table);
    syn::custom_keyword!(id);
    syn::custom_keyword!(id_column);
    syn::custom_keyword!(column);
    syn::custom_keyword!(from);
    syn::custom_keyword!(to);
    syn::custom_keyword!(already);
}

/// Every argument names, for the "unknown argument" message.
const ARGUMENTS: &str = "key, store, namespace, principal, ttl, lease, wait, fingerprint, on_error, \
                         map_err, tx, transition(..), executor, already";

/// A duration argument, in milliseconds, with the literal's span.
#[derive(Clone)]
pub(crate) struct DurationArg {
    pub(crate) millis: u64,
    pub(crate) span: Span,
}

/// What happens to the key when the body returns `Err`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnError {
    Release,
    Keep,
}

/// `transition(table = "orders", id = order_id, column = "status", from = "WAIT_PAY", to = "PAID")`;
/// states are string literals or integer literals (`from = 10, to = 20`).
pub(crate) struct Transition {
    pub(crate) span: Span,
    pub(crate) table: Option<LitStr>,
    pub(crate) id: Option<Expr>,
    pub(crate) id_column: Option<LitStr>,
    pub(crate) column: Option<LitStr>,
    pub(crate) from: Option<Vec<Lit>>,
    pub(crate) to: Option<Lit>,
}

/// All arguments, each at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<Expr>,
    pub(crate) store: Option<Expr>,
    pub(crate) namespace: Option<LitStr>,
    pub(crate) principal: Option<Expr>,
    pub(crate) ttl: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) fingerprint: Option<Vec<Expr>>,
    pub(crate) on_error: Option<(OnError, Span)>,
    pub(crate) map_err: Option<Expr>,
    pub(crate) tx: Option<Expr>,
    pub(crate) transition: Option<Transition>,
    pub(crate) executor: Option<Expr>,
    pub(crate) already: Option<Expr>,
}

/// Stores `value` in `slot`, or fails on `span` if the argument was given before.
fn set_once<T>(slot: &mut Option<T>, value: T, span: Span, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("duplicate argument `{name}`: give it once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

fn duration(input: ParseStream<'_>) -> syn::Result<DurationArg> {
    let literal: LitStr = input.parse()?;
    let millis = parse_duration(&literal.value()).ok_or_else(|| {
        syn::Error::new(
            literal.span(),
            format!(
                "invalid duration {:?}: write a number and a unit, such as \"500ms\", \"30s\", \
                 \"15m\", \"24h\", \"7d\" or \"1h30m\"",
                literal.value()
            ),
        )
    })?;
    Ok(DurationArg {
        millis,
        span: literal.span(),
    })
}

macro_rules! keyword_value {
    ($input:expr, $kw:ident, $slot:expr, $parse:expr) => {{
        let keyword: kw::$kw = $input.parse()?;
        let _: Token![=] = $input.parse()?;
        let value = $parse($input)?;
        set_once($slot, value, keyword.span, stringify!($kw))
    }};
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let look = input.lookahead1();
            if look.peek(kw::key) {
                keyword_value!(input, key, &mut args.key, Expr::parse)?;
            } else if look.peek(kw::store) {
                keyword_value!(input, store, &mut args.store, Expr::parse)?;
            } else if look.peek(kw::engine) {
                keyword_value!(input, engine, &mut args.store, Expr::parse)?;
            } else if look.peek(kw::namespace) {
                keyword_value!(
                    input,
                    namespace,
                    &mut args.namespace,
                    <LitStr as Parse>::parse
                )?;
            } else if input.peek(kw::scope) {
                let keyword: kw::scope = input.parse()?;
                return Err(syn::Error::new(
                    keyword.span,
                    "`scope = \"..\"` is now `namespace = \"..\"`: it names the records' namespace",
                ));
            } else if look.peek(kw::principal) {
                keyword_value!(input, principal, &mut args.principal, Expr::parse)?;
            } else if look.peek(kw::ttl) {
                keyword_value!(input, ttl, &mut args.ttl, duration)?;
            } else if look.peek(kw::lease) {
                keyword_value!(input, lease, &mut args.lease, duration)?;
            } else if look.peek(kw::wait) {
                keyword_value!(input, wait, &mut args.wait, duration)?;
            } else if look.peek(kw::fingerprint) {
                keyword_value!(input, fingerprint, &mut args.fingerprint, expr_list)?;
            } else if look.peek(kw::on_error) {
                keyword_value!(input, on_error, &mut args.on_error, on_error)?;
            } else if look.peek(kw::map_err) {
                keyword_value!(input, map_err, &mut args.map_err, Expr::parse)?;
            } else if look.peek(kw::tx) {
                keyword_value!(input, tx, &mut args.tx, Expr::parse)?;
            } else if look.peek(kw::executor) {
                keyword_value!(input, executor, &mut args.executor, Expr::parse)?;
            } else if look.peek(kw::already) {
                keyword_value!(input, already, &mut args.already, Expr::parse)?;
            } else if look.peek(kw::transition) {
                let keyword: kw::transition = input.parse()?;
                let transition = Transition::parse_body(input, keyword.span)?;
                set_once(&mut args.transition, transition, keyword.span, "transition")?;
            } else if look.peek(Ident) {
                let unknown: Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!("unknown argument `{unknown}`; the arguments are: {ARGUMENTS}"),
                ));
            } else {
                return Err(look.error());
            }
            if input.is_empty() {
                break;
            }
            let _: Token![,] = input.parse()?;
        }
        Ok(args)
    }
}

fn expr_list(input: ParseStream<'_>) -> syn::Result<Vec<Expr>> {
    let content;
    bracketed!(content in input);
    let list = Punctuated::<Expr, Token![,]>::parse_terminated(&content)?;
    Ok(list.into_iter().collect())
}

fn on_error(input: ParseStream<'_>) -> syn::Result<(OnError, Span)> {
    let literal: LitStr = input.parse()?;
    match literal.value().as_str() {
        "release" => Ok((OnError::Release, literal.span())),
        "keep" => Ok((OnError::Keep, literal.span())),
        other => Err(syn::Error::new(
            literal.span(),
            format!(
                "unknown on_error {other:?}: write on_error = \"release\" (an `Err` lets a retry \
                 run again; the default) or on_error = \"keep\" (an `Err` is stored and replayed)"
            ),
        )),
    }
}

impl Transition {
    fn parse_body(input: ParseStream<'_>, span: Span) -> syn::Result<Self> {
        let content;
        parenthesized!(content in input);
        let mut transition = Transition {
            span,
            table: None,
            id: None,
            id_column: None,
            column: None,
            from: None,
            to: None,
        };
        while !content.is_empty() {
            let look = content.lookahead1();
            if look.peek(kw::table) {
                keyword_value!(
                    &content,
                    table,
                    &mut transition.table,
                    <LitStr as Parse>::parse
                )?;
            } else if look.peek(kw::id_column) {
                keyword_value!(
                    &content,
                    id_column,
                    &mut transition.id_column,
                    <LitStr as Parse>::parse
                )?;
            } else if look.peek(kw::id) {
                keyword_value!(&content, id, &mut transition.id, Expr::parse)?;
            } else if look.peek(kw::column) {
                keyword_value!(
                    &content,
                    column,
                    &mut transition.column,
                    <LitStr as Parse>::parse
                )?;
            } else if look.peek(kw::from) {
                keyword_value!(&content, from, &mut transition.from, states)?;
            } else if look.peek(kw::to) {
                keyword_value!(&content, to, &mut transition.to, state)?;
            } else if look.peek(Ident) {
                let unknown: Ident = content.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!(
                        "unknown transition argument `{unknown}`; write \
                         transition(table = \"orders\", id = order_id, id_column = \"id\", column = \"status\", \
                         from = \"WAIT_PAY\", to = \"PAID\")"
                    ),
                ));
            } else {
                return Err(look.error());
            }
            if content.is_empty() {
                break;
            }
            let _: Token![,] = content.parse()?;
        }
        Ok(transition)
    }
}

/// `"A"` or `["A", "B"]`.
fn states(input: ParseStream<'_>) -> syn::Result<Vec<Lit>> {
    if input.peek(syn::token::Bracket) {
        let content;
        bracketed!(content in input);
        let list = Punctuated::<Lit, Token![,]>::parse_terminated_with(&content, state)?;
        Ok(list.into_iter().collect())
    } else {
        Ok(vec![state(input)?])
    }
}

/// One state: a string literal (`"PAID"`) or an integer literal (`20`).
fn state(input: ParseStream<'_>) -> syn::Result<Lit> {
    match input.parse()? {
        lit @ (Lit::Str(_) | Lit::Int(_)) => Ok(lit),
        other => Err(syn::Error::new(
            other.span(),
            "a state is a string literal (\"PAID\") or an integer literal (20)",
        )),
    }
}
