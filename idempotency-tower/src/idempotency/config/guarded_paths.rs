//! What a layer guards, checked and logged once when it is built.
//!
//! A mistyped [`only_paths`](crate::IdempotencyLayerBuilder::only_paths) entry would turn
//! deduplication off for the route it meant, with no sign; so each entry is checked when the
//! layer is built, and the guarded methods and paths are logged once (INFO, target
//! `idempotency`).

use super::settings::Settings;

/// Why an `only_paths` entry can never match a request's path, if it cannot.
pub(crate) fn path_problem(path: &str, grpc: bool) -> Option<String> {
    if path.is_empty() {
        return Some("is empty".to_owned());
    }
    if !path.starts_with('/') {
        return Some(format!("does not start with '/' (try \"/{path}\")"));
    }
    if let Some(c) = path.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("holds whitespace or a control character ({c:?})"));
    }
    if !path.is_ascii() {
        return Some(
            "holds non-ASCII characters: list the path as requests carry it, percent-encoded"
                .to_owned(),
        );
    }
    if path.contains('?') || path.contains('#') {
        return Some("holds a query or fragment: requests are matched by path alone".to_owned());
    }
    if path.contains('{') || path.contains('}') || path.contains('*') {
        return Some(
            "is a route pattern: list exact paths (a pattern is matched as literal text)"
                .to_owned(),
        );
    }
    if path.split('/').any(|segment| segment.starts_with(':')) {
        return Some(
            "is a route pattern (':param'): list exact paths (a pattern is matched as literal \
             text)"
                .to_owned(),
        );
    }
    if path.contains("//") {
        return Some("holds an empty segment ('//')".to_owned());
    }
    match path.parse::<http::uri::PathAndQuery>() {
        Ok(parsed) if parsed.path() == path => {}
        _ => return Some("is not a valid URI path".to_owned()),
    }
    if grpc {
        let mut parts = path[1..].split('/');
        let (service, method) = (parts.next(), parts.next());
        let well_formed = matches!((service, method), (Some(s), Some(m)) if !s.is_empty() && !m.is_empty())
            && parts.next().is_none();
        if !well_formed {
            return Some("is not a gRPC method path (\"/package.Service/Method\")".to_owned());
        }
    }
    None
}

/// Checks the guarded paths, panicking with every problem found: a layer that would silently
/// guard nothing must not start.
pub(crate) fn check(settings: &Settings) {
    let Some(paths) = &settings.paths else {
        return;
    };
    let namespace = settings.scope.namespace();
    let mut problems: Vec<String> = paths
        .iter()
        .filter_map(|path| {
            path_problem(path, settings.grpc).map(|problem| format!("{path:?} {problem}"))
        })
        .collect();
    if paths.is_empty() {
        problems.push("the list is empty: the layer would guard nothing".to_owned());
    }
    assert!(
        problems.is_empty(),
        "idempotency layer (namespace {namespace:?}): only_paths cannot match: {}",
        problems.join("; ")
    );
}

/// Logs once what the layer guards.
pub(crate) fn log(settings: &Settings) {
    let methods: Vec<&str> = settings.methods.iter().map(http::Method::as_str).collect();
    match &settings.paths {
        Some(paths) => tracing::info!(
            target: "idempotency",
            namespace = settings.scope.namespace(),
            methods = ?methods,
            paths = ?paths,
            grpc = settings.grpc,
            "idempotency layer guards these paths"
        ),
        None => tracing::info!(
            target: "idempotency",
            namespace = settings.scope.namespace(),
            methods = ?methods,
            grpc = settings.grpc,
            "idempotency layer guards every path"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_cannot_match_are_named() {
        for good in ["/orders", "/payments/callback", "/a/b/", "/v1/orders%20x"] {
            assert_eq!(path_problem(good, false), None, "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("orders", "start with '/'"),
            ("/orders ", "whitespace"),
            ("/ord ers", "whitespace"),
            ("/orders?x=1", "query"),
            ("/orders#top", "fragment"),
            ("/orders/{id}", "pattern"),
            ("/orders/:id", "pattern"),
            ("/files/*rest", "pattern"),
            ("/a//b", "empty segment"),
            ("/caf\u{e9}", "percent-encoded"),
        ] {
            let problem = path_problem(bad, false).unwrap_or_default();
            assert!(problem.contains(why), "{bad:?}: {problem:?}");
        }
        assert_eq!(path_problem("/pay.v1.Pay/Pay", true), None);
        for bad in ["/pay.v1.Pay", "/pay.v1.Pay/Pay/x", "/pay.v1.Pay/"] {
            let problem = path_problem(bad, true).unwrap_or_default();
            assert!(problem.contains("gRPC method path"), "{bad:?}: {problem:?}");
        }
    }
}
