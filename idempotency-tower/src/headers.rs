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

/// Which header (or trailer) fields of one map are stored: not hop-by-hop ones (including those
/// its `Connection` header names), not `Date`, and, unless `keep_sensitive`, no credentials
/// (`Set-Cookie`, `Authorization`, `Cookie`, `WWW-Authenticate`, and every value of a name one
/// of whose values is marked sensitive). Decides field by field, so the map itself is neither
/// copied nor changed.
pub(crate) struct Storable {
    named_by_connection: Vec<HeaderName>,
    /// Names with a value marked sensitive (dropped whole unless `keep_sensitive`).
    sensitive_values: Vec<HeaderName>,
    keep_sensitive: bool,
}

impl Storable {
    /// The rule for `headers`. Allocates nothing unless `headers` has a `Connection` header or
    /// (with `keep_sensitive` off) a value marked sensitive.
    pub(crate) fn new(headers: &HeaderMap, keep_sensitive: bool) -> Self {
        let named_by_connection = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|list| list.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        let sensitive_values = if keep_sensitive {
            Vec::new()
        } else {
            headers
                .iter()
                .filter(|(_, value)| value.is_sensitive())
                .map(|(name, _)| name.clone())
                .collect()
        };
        Self {
            named_by_connection,
            sensitive_values,
            keep_sensitive,
        }
    }

    /// Whether the field `name` is stored.
    pub(crate) fn keeps(&self, name: &HeaderName) -> bool {
        !(is_hop_by_hop_or_date(name)
            || self.named_by_connection.contains(name)
            || (!self.keep_sensitive
                && (is_sensitive(name) || self.sensitive_values.contains(name))))
    }
}

/// Removes, in place, what [`Storable`] does not keep.
#[cfg(test)]
pub(crate) fn strip_unstorable(headers: &mut HeaderMap, keep_sensitive: bool) {
    let rule = Storable::new(headers, keep_sensitive);
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| !rule.keeps(name))
        .cloned()
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

    #[test]
    fn one_sensitive_value_drops_the_whole_name() {
        let mut headers = HeaderMap::new();
        headers.append("x-token", HeaderValue::from_static("public"));
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        headers.append("x-token", secret);
        headers.append("x-other", HeaderValue::from_static("1"));
        let rule = Storable::new(&headers, false);
        assert!(!rule.keeps(&HeaderName::from_static("x-token")));
        assert!(rule.keeps(&HeaderName::from_static("x-other")));
        assert!(Storable::new(&headers, true).keeps(&HeaderName::from_static("x-token")));
    }
}
