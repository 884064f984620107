//! Which response headers are kept for replay.

use http::header::{self, HeaderMap, HeaderName};

/// The header added to every replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The default key header, `Idempotency-Key` (gRPC metadata `idempotency-key` is the same name).
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Hop-by-hop headers (RFC 9110 §7.6.1) and `Date`: never stored.
fn is_hop_by_hop_or_date(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == KEEP_ALIVE
        || name == header::TRANSFER_ENCODING
        || name == header::TE
        || name == header::TRAILER
        || name == header::UPGRADE
        || name == header::DATE
        || name == PROXY_CONNECTION
        || name.as_str().starts_with("proxy-")
}

/// Credentials: not stored unless enabled.
fn is_sensitive(name: &HeaderName) -> bool {
    name == header::SET_COOKIE
        || name == header::AUTHORIZATION
        || name == header::COOKIE
        || name == header::WWW_AUTHENTICATE
}

/// Removes, in place, what must not be stored: hop-by-hop headers (including those the
/// `Connection` header names), `Date`, and, unless `keep_sensitive`, credentials (`Set-Cookie`,
/// `Authorization`, `Cookie`, `WWW-Authenticate` and any value marked sensitive).
pub(crate) fn strip_unstorable(headers: &mut HeaderMap, keep_sensitive: bool) {
    let named_by_connection: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|list| list.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named_by_connection {
        headers.remove(name);
    }
    let doomed: Vec<HeaderName> = headers
        .iter()
        .filter(|(name, value)| {
            is_hop_by_hop_or_date(name)
                || (!keep_sensitive && (is_sensitive(name) || value.is_sensitive()))
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in doomed {
        headers.remove(name);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn strips_hop_by_hop_date_and_credentials() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("trailer", "grpc-status"),
            ("upgrade", "h2c"),
            ("proxy-authenticate", "Basic"),
            ("date", "Mon, 30 Nov 2026 06:00:00 GMT"),
            ("x-private", "1"),
            ("set-cookie", "a=b"),
            ("content-type", "application/json"),
            ("location", "/orders/1"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        headers.insert("x-token", secret);

        let mut kept = headers.clone();
        strip_unstorable(&mut kept, false);
        let names: Vec<_> = kept.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["content-type", "location"]);

        let mut with_cookies = headers;
        strip_unstorable(&mut with_cookies, true);
        assert!(with_cookies.contains_key("set-cookie"));
        assert!(with_cookies.contains_key("x-token"));
        assert!(!with_cookies.contains_key("date"));
    }
}
