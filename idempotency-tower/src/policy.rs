//! Which responses are stored. (What a duplicate in flight gets is core's
//! [`InFlightPolicy`](idempotency_core::InFlightPolicy), one policy for every front end.)

use std::sync::Arc;

use http::{HeaderMap, StatusCode};

/// A user storage rule over the response status, headers and trailers.
pub type StoreFn = dyn Fn(StatusCode, &HeaderMap, Option<&HeaderMap>) -> bool + Send + Sync;

/// Which handler responses are stored for replay. A response that is not stored releases the key,
/// so the client's retry runs the handler again.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum StoragePolicy {
    /// 2xx, 3xx and 4xx except 408, 409, 425 and 429 are stored; 1xx and 5xx release. The default.
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
    /// `ALREADY_EXISTS`, `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`,
    /// `UNIMPLEMENTED`, `UNAUTHENTICATED`); released: the rest (`CANCELLED`, `UNKNOWN`,
    /// `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, `ABORTED`, `INTERNAL`, `UNAVAILABLE`,
    /// `DATA_LOSS`), a missing `grpc-status` and any HTTP status other than 200.
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
        408 | 409 | 425 | 429 => false,
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
    matches!(code, 0 | 3 | 5 | 6 | 7 | 9 | 11 | 12 | 16)
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
        for status in [408, 409, 425, 429, 500, 502, 503, 101] {
            assert!(!stored(&p, status), "{status} must not be stored");
        }
        let stripe = StoragePolicy::IncludeServerErrors;
        assert!(stored(&stripe, 500) && stored(&stripe, 503) && !stored(&stripe, 429));
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
    }
}
