//! Which responses are stored. (What a duplicate in flight gets is core's
//! [`InFlightPolicy`](idempotency_core::InFlightPolicy), one policy for every front end.)

use std::sync::Arc;

use http::{HeaderMap, StatusCode};

/// A user storage rule over the response status, headers and trailers.
pub type StoreFn = dyn Fn(StatusCode, &HeaderMap, Option<&HeaderMap>) -> bool + Send + Sync;

/// Which handler responses are stored for replay. A response that is not stored releases the key,
/// so the client's retry runs the handler again.
///
/// The rule behind [`Standard`](Self::Standard) and [`Grpc`](Self::Grpc): store the answer the
/// same request will always get (the IETF draft: a retry gets the earlier result, "success or
/// an error"); release an answer a retry can change (credentials refreshed, a lock or a limit
/// lifted, a transient failure). Refusals produced inside the guarded service count too: an
/// authentication layer or a tonic interceptor *inside* the idempotency layer answering 401 /
/// `UNAUTHENTICATED` releases the key, and the retry with a fresh token runs.
///
/// | HTTP status ([`Standard`](Self::Standard)) | stored | why |
/// |---|---|---|
/// | 1xx | no | not a final answer |
/// | 2xx | yes | the outcome of the work |
/// | 3xx | yes | a redirect (303 to the created resource) is the outcome |
/// | 400, 404, 405, 410, 413, 415, 422 and other 4xx | yes | decided by the request itself: the same payload gets the same answer |
/// | 401 Unauthorized, 407 Proxy Authentication Required | no | a retry with refreshed credentials can succeed (keys are scoped to the principal, not the credential) |
/// | 403 Forbidden | no | a permission granted since changes it |
/// | 408 Request Timeout | no | the server never got the whole request; RFC 9110 expects a retry |
/// | 409 Conflict | no | a conflict with the resource's current state, which changes |
/// | 421 Misdirected Request | no | RFC 9110: the client may retry on another connection |
/// | 423 Locked | no | a lock that is released |
/// | 425 Too Early | no | RFC 8470: retried after the handshake |
/// | 428 Precondition Required | no | the retry adds the precondition header the fingerprint does not cover |
/// | 429 Too Many Requests | no | a rate limit that lifts; replayed, it would refuse the key for the TTL |
/// | 451 Unavailable For Legal Reasons | no | an access decision about the caller, like 403, not the request's result |
/// | 5xx | no | a server failure: the retry runs again ([`IncludeServerErrors`](Self::IncludeServerErrors), Stripe's choice, stores them) |
///
/// | `grpc-status` ([`Grpc`](Self::Grpc)) | stored | why |
/// |---|---|---|
/// | `OK` | yes | the outcome |
/// | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED` | yes | decided by the request and the state it found; gRPC: not to be retried as is |
/// | `UNAUTHENTICATED`, `PERMISSION_DENIED` | no | a retry with other credentials or permissions can succeed |
/// | `RESOURCE_EXHAUSTED` | no | a quota or limit that lifts |
/// | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `CANCELLED`, `ABORTED` | no | transient: gRPC's retry policy retries them (`ABORTED` at a higher level) |
/// | `UNKNOWN`, `INTERNAL`, `DATA_LOSS` | no | server failures, as 5xx |
/// | no `grpc-status`, or HTTP status other than 200 | no | not a gRPC answer |
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum StoragePolicy {
    /// 2xx, 3xx and 4xx except 401, 403, 407, 408, 409, 421, 423, 425, 428, 429 and 451 are
    /// stored; 1xx and 5xx release (see the table above). The default.
    #[default]
    Standard,
    /// Like [`StoragePolicy::Standard`], and 5xx are stored too (Stripe's choice: a request that
    /// failed on the server is not retried with the same key).
    IncludeServerErrors,
    /// Only 2xx are stored; every other answer releases the key (the callback preset: a
    /// gateway's identical retry of a callback answered 404 or 400 must run again, or the
    /// payment is lost).
    SuccessOnly,
    /// gRPC: the `grpc-status` (trailers, or headers of a trailers-only answer) decides. Stored:
    /// `OK` and the codes a retry cannot change (`INVALID_ARGUMENT`, `NOT_FOUND`,
    /// `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`); released: the
    /// rest (`UNAUTHENTICATED`, `PERMISSION_DENIED`, `CANCELLED`, `UNKNOWN`,
    /// `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, `ABORTED`, `INTERNAL`, `UNAVAILABLE`,
    /// `DATA_LOSS`), a missing `grpc-status` and any HTTP status other than 200 (see the table
    /// above).
    Grpc,
    /// A user rule.
    Custom(Arc<StoreFn>),
}

impl std::fmt::Debug for StoragePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Standard => f.write_str("Standard"),
            Self::IncludeServerErrors => f.write_str("IncludeServerErrors"),
            Self::SuccessOnly => f.write_str("SuccessOnly"),
            Self::Grpc => f.write_str("Grpc"),
            Self::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl StoragePolicy {
    /// A user rule: `store(status, headers, trailers)`.
    pub fn custom(
        store: impl Fn(StatusCode, &HeaderMap, Option<&HeaderMap>) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::Custom(Arc::new(store))
    }

    /// Whether a response is stored.
    pub fn should_store(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        trailers: Option<&HeaderMap>,
    ) -> bool {
        match self {
            Self::Standard => standard(status),
            Self::IncludeServerErrors => standard(status) || status.is_server_error(),
            Self::SuccessOnly => status.is_success(),
            Self::Grpc => {
                status == StatusCode::OK
                    && grpc_code(headers, trailers).is_some_and(grpc_code_is_final)
            }
            Self::Custom(store) => store(status, headers, trailers),
        }
    }
}

fn standard(status: StatusCode) -> bool {
    match status.as_u16() {
        401 | 403 | 407 | 408 | 409 | 421 | 423 | 425 | 428 | 429 | 451 => false,
        200..=499 => true,
        _ => false,
    }
}

/// The `grpc-status` of a response: from the trailers, else from the headers (trailers-only).
pub(crate) fn grpc_code(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Option<u16> {
    trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| headers.get("grpc-status"))
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse().ok())
}

fn grpc_code_is_final(code: u16) -> bool {
    matches!(code, 0 | 3 | 5 | 6 | 9 | 11 | 12)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn stored(policy: &StoragePolicy, status: u16) -> bool {
        policy.should_store(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            None,
        )
    }

    #[test]
    fn standard_follows_the_contract() {
        let p = StoragePolicy::Standard;
        for status in [200, 201, 204, 301, 303, 400, 404, 410, 422] {
            assert!(stored(&p, status), "{status} must be stored");
        }
        for status in [
            401, 403, 407, 408, 409, 421, 423, 425, 428, 429, 451, 500, 502, 503, 101,
        ] {
            assert!(!stored(&p, status), "{status} must not be stored");
        }
        let stripe = StoragePolicy::IncludeServerErrors;
        assert!(stored(&stripe, 500) && stored(&stripe, 503) && !stored(&stripe, 429));
        assert!(!stored(&stripe, 401) && !stored(&stripe, 403));
        let success = StoragePolicy::SuccessOnly;
        assert!(stored(&success, 200) && stored(&success, 201) && stored(&success, 204));
        for status in [301, 400, 404, 409, 422, 500] {
            assert!(!stored(&success, status), "{status} must not be stored");
        }
        let custom = StoragePolicy::custom(|status, _, _| status == StatusCode::OK);
        assert!(stored(&custom, 200) && !stored(&custom, 201));
    }

    #[test]
    fn grpc_reads_trailers_then_headers() {
        let p = StoragePolicy::Grpc;
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(p.should_store(StatusCode::OK, &HeaderMap::new(), Some(&trailers)));
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        assert!(!p.should_store(StatusCode::OK, &HeaderMap::new(), Some(&trailers)));
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", HeaderValue::from_static("5"));
        assert!(p.should_store(StatusCode::OK, &headers, None));
        assert!(!p.should_store(StatusCode::OK, &HeaderMap::new(), None));
        assert!(!p.should_store(StatusCode::BAD_GATEWAY, &headers, None));
        for (code, kept) in [
            ("0", true),
            ("3", true),
            ("5", true),
            ("6", true),
            ("9", true),
            ("11", true),
            ("12", true),
            ("1", false),
            ("2", false),
            ("4", false),
            ("7", false),
            ("8", false),
            ("10", false),
            ("13", false),
            ("14", false),
            ("15", false),
            ("16", false),
        ] {
            headers.insert("grpc-status", HeaderValue::from_static(code));
            assert_eq!(
                p.should_store(StatusCode::OK, &headers, None),
                kept,
                "grpc-status {code}"
            );
        }
    }
}
