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

/// Fields that carry credentials (sessions, tokens, keys, challenges): never stored for replay
/// unless enabled ([`store_sensitive_headers`](crate::IdempotencyLayerBuilder::store_sensitive_headers)).
/// `Proxy-Authenticate` and `Proxy-Authorization` are hop-by-hop as well, so never stored.
const CREDENTIALS: [HeaderName; 14] = [
    header::SET_COOKIE,
    header::COOKIE,
    header::AUTHORIZATION,
    header::WWW_AUTHENTICATE,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("authentication-info"),
    HeaderName::from_static("proxy-authentication-info"),
    HeaderName::from_static("set-cookie2"),
    HeaderName::from_static("x-auth-token"),
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("x-csrf-token"),
    HeaderName::from_static("x-xsrf-token"),
    HeaderName::from_static("x-amz-security-token"),
];

/// Credentials: not stored unless enabled.
fn is_sensitive(name: &HeaderName) -> bool {
    CREDENTIALS.contains(name)
}

/// What one pass over a header (or trailer) map tells the stored-response rules, so that none of
/// them looks a field up or walks the map again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Survey {
    /// How many fields (values) the map holds.
    pub(crate) fields: usize,
    /// The bytes of their names and values.
    pub(crate) bytes: usize,
    /// Whether it has a `Content-Length` field.
    pub(crate) content_length: bool,
    /// Whether it has a `Transfer-Encoding` field.
    pub(crate) transfer_encoding: bool,
    /// Whether it has a `Connection` field (whose values name more hop-by-hop fields).
    connection: bool,
    /// Whether a value is marked sensitive.
    sensitive: bool,
}

impl Survey {
    /// Surveys `map`.
    pub(crate) fn of(map: &HeaderMap) -> Self {
        let mut survey = Self::default();
        for (name, value) in map {
            survey.fields += 1;
            survey.bytes += name.as_str().len() + value.len();
            survey.content_length |= name == header::CONTENT_LENGTH;
            survey.transfer_encoding |= name == header::TRANSFER_ENCODING;
            survey.connection |= name == header::CONNECTION;
            survey.sensitive |= value.is_sensitive();
        }
        survey
    }
}

/// Which header (or trailer) fields of one map are stored: not hop-by-hop ones (including those
/// its `Connection` header names), not `Date`, and, unless `keep_sensitive`, no credentials
/// ([`CREDENTIALS`], and every value of a name one of whose values is marked sensitive). Decides field by field, so the map itself is neither
/// copied nor changed.
pub(crate) struct Storable {
    named_by_connection: Vec<HeaderName>,
    /// Names with a value marked sensitive (dropped whole unless `keep_sensitive`).
    sensitive_values: Vec<HeaderName>,
    keep_sensitive: bool,
}

impl Storable {
    /// The rule for `headers`, which `survey` describes. Reads the map again only if it has a
    /// `Connection` field or (with `keep_sensitive` off) a value marked sensitive.
    pub(crate) fn new(headers: &HeaderMap, survey: &Survey, keep_sensitive: bool) -> Self {
        let named_by_connection = if survey.connection {
            headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|list| list.split(','))
                .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
                .collect()
        } else {
            Vec::new()
        };
        let sensitive_values = if keep_sensitive || !survey.sensitive {
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
    let rule = Storable::new(headers, &Survey::of(headers), keep_sensitive);
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
    fn a_survey_counts_fields_and_bytes_and_notes_what_the_rules_need() {
        let mut headers = HeaderMap::new();
        assert_eq!(Survey::of(&headers), Survey::default());
        headers.append("content-type", HeaderValue::from_static("text/plain"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("22"));
        let plain = Survey::of(&headers);
        assert_eq!((plain.fields, plain.bytes), (3, 12 + 10 + 3 + 1 + 3 + 2));
        assert!(!plain.content_length && !plain.transfer_encoding);
        assert!(!plain.connection && !plain.sensitive);

        headers.insert("content-length", HeaderValue::from_static("5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("connection", HeaderValue::from_static("x-a"));
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        headers.insert("x-token", secret);
        let full = Survey::of(&headers);
        assert_eq!(full.fields, 7);
        assert!(full.content_length && full.transfer_encoding);
        assert!(full.connection && full.sensitive);
        // What the survey lets the rule skip reading, it must not change.
        let rule = Storable::new(&headers, &full, false);
        assert!(!rule.keeps(&HeaderName::from_static("x-a")));
        assert!(!rule.keeps(&HeaderName::from_static("x-token")));
        assert!(rule.keeps(&header::CONTENT_TYPE));
    }

    #[test]
    fn one_sensitive_value_drops_the_whole_name() {
        let mut headers = HeaderMap::new();
        headers.append("x-token", HeaderValue::from_static("public"));
        let mut secret = HeaderValue::from_static("s");
        secret.set_sensitive(true);
        headers.append("x-token", secret);
        headers.append("x-other", HeaderValue::from_static("1"));
        let survey = Survey::of(&headers);
        let rule = Storable::new(&headers, &survey, false);
        assert!(!rule.keeps(&HeaderName::from_static("x-token")));
        assert!(rule.keeps(&HeaderName::from_static("x-other")));
        let kept = Storable::new(&headers, &survey, true);
        assert!(kept.keeps(&HeaderName::from_static("x-token")));
    }
}
