//! Checks of the annotated function: `async`, a `Result` return type, and argument names used by
//! the attribute's expressions.

use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, Pat, ReturnType, Signature, Type};

/// What the expansion needs to know about the function.
pub(crate) struct FnInfo {
    /// The declared return type (`Result<T, E>` or an alias of it).
    pub(crate) output: Type,
    /// The names bound by the arguments (through patterns such as `Json(event)`).
    names: Vec<Ident>,
    /// Whether the function takes `self`.
    has_receiver: bool,
    /// The function's name.
    pub(crate) name: Ident,
}

impl FnInfo {
    /// Checks that `sig` is an `async fn` returning a `Result`, and collects its argument names.
    pub(crate) fn of(sig: &Signature) -> syn::Result<Self> {
        if sig.asyncness.is_none() && returns_boxed_future(&sig.output) {
            return Err(syn::Error::new(
                sig.fn_token.span,
                "`#[idempotent]` sees a method already rewritten by `#[async_trait]` (or \
                 `#[tonic::async_trait]`): put `#[idempotent]` on an inherent `async fn` and call \
                 it from the trait method",
            ));
        }
        if sig.asyncness.is_none() {
            return Err(syn::Error::new(
                sig.fn_token.span,
                format!(
                    "`#[idempotent]` needs an `async fn`: write `async fn {}(…)`",
                    sig.ident
                ),
            ));
        }
        let output = match &sig.output {
            ReturnType::Type(_, ty) if is_result(ty) => (**ty).clone(),
            ReturnType::Type(_, ty) => {
                return Err(syn::Error::new(
                    ty.span(),
                    "`#[idempotent]` functions return `Result<T, E>`: `Ok(T)` is stored and \
                     replayed, `E` is built from `idempotency_core::Error`; write \
                     `-> Result<T, E>`",
                ));
            }
            ReturnType::Default => {
                return Err(syn::Error::new(
                    sig.paren_token.span.join(),
                    "`#[idempotent]` functions return `Result<T, E>`: add `-> Result<T, E>` \
                     (`Ok(T)` is stored and replayed)",
                ));
            }
        };
        let mut names = Vec::new();
        let mut has_receiver = false;
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => has_receiver = true,
                FnArg::Typed(typed) => bindings(&typed.pat, &mut names),
            }
        }
        Ok(Self {
            output,
            names,
            has_receiver,
            name: sig.ident.clone(),
        })
    }

    /// Checks that the variable `expr` starts from is an argument (or `self`). Expressions that
    /// start elsewhere (a call, a path, a literal, an upper-case static) are not checked.
    pub(crate) fn check_root(&self, expr: &Expr, what: &str) -> syn::Result<()> {
        let Some(root) = root_variable(expr) else {
            return Ok(());
        };
        if root == "self" {
            return if self.has_receiver {
                Ok(())
            } else {
                Err(syn::Error::new(
                    root.span(),
                    format!(
                        "the {what} uses `self`, but `{}` takes no `self` argument; name one of \
                         its arguments instead",
                        self.name
                    ),
                ))
            };
        }
        let lower = root
            .to_string()
            .chars()
            .next()
            .is_some_and(|c| c.is_lowercase() || c == '_');
        if !lower || self.names.iter().any(|name| name == root) {
            return Ok(());
        }
        let mut known: Vec<String> = self.names.iter().map(|name| format!("`{name}`")).collect();
        if self.has_receiver {
            known.insert(0, "`self`".to_owned());
        }
        let known = if known.is_empty() {
            "it has none".to_owned()
        } else {
            format!("write an expression over {}", known.join(", "))
        };
        Err(syn::Error::new(
            root.span(),
            format!(
                "the {what} names `{root}`, which is not an argument of `{}`; {known}",
                self.name
            ),
        ))
    }
}

/// `Pin<Box<dyn Future<…>>>`: the shape `#[async_trait]` gives trait methods.
fn returns_boxed_future(output: &ReturnType) -> bool {
    match output {
        ReturnType::Type(_, ty) => match &**ty {
            Type::Path(path) => path
                .path
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "Pin"),
            _ => false,
        },
        ReturnType::Default => false,
    }
}

/// `Result<…>`, `io::Result<…>`, `anyhow::Result<…>`, `AppResult<…>`.
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident.to_string().ends_with("Result")),
        Type::Paren(inner) => is_result(&inner.elem),
        Type::Group(inner) => is_result(&inner.elem),
        _ => false,
    }
}

/// The names a pattern binds: `x`, `mut x`, `Json(event)`, `State(AppState { db, .. })`, `(a, b)`.
fn bindings(pat: &Pat, out: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(ident) => {
            out.push(ident.ident.clone());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, out);
            }
        }
        Pat::Reference(reference) => bindings(&reference.pat, out),
        Pat::Paren(paren) => bindings(&paren.pat, out),
        Pat::Type(typed) => bindings(&typed.pat, out),
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|pat| bindings(pat, out)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|pat| bindings(pat, out)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|pat| bindings(pat, out)),
        Pat::Struct(structure) => structure
            .fields
            .iter()
            .for_each(|field| bindings(&field.pat, out)),
        Pat::Or(or) => or.cases.iter().for_each(|pat| bindings(pat, out)),
        _ => {}
    }
}

/// The variable an expression starts from: `event` in `event.trade_no`, `&event.id`,
/// `event.id.to_string()`, `event.ids[0]`.
fn root_variable(expr: &Expr) -> Option<&Ident> {
    match expr {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident(),
        Expr::Field(field) => root_variable(&field.base),
        Expr::MethodCall(call) => root_variable(&call.receiver),
        Expr::Reference(reference) => root_variable(&reference.expr),
        Expr::Paren(paren) => root_variable(&paren.expr),
        Expr::Group(group) => root_variable(&group.expr),
        Expr::Index(index) => root_variable(&index.expr),
        Expr::Cast(cast) => root_variable(&cast.expr),
        Expr::Try(expr) => root_variable(&expr.expr),
        Expr::Unary(unary) => root_variable(&unary.expr),
        _ => None,
    }
}
