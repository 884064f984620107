//! The one error type of the toolkit: what a store, a claim or a guarded call can answer
//! instead of a result.

use std::sync::Arc;
use std::time::Duration;

use crate::KeyError;

/// What a backend reported, kept whole: the driver's own error (`sqlx::Error`,
/// `redis::RedisError`, an I/O error), reachable through [`std::error::Error::source`] of the
/// [`Error`] that carries it and by `downcast_ref`, or a message where there is no error value.
/// Cheap to clone: one failure answers every waiter of a key.
///
/// ```
/// use idempotency_core::{Cause, Error};
/// use std::error::Error as _;
///
/// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let error = Error::Unavailable(Cause::new(refused));
/// let io = error.source().and_then(|source| source.downcast_ref::<std::io::Error>());
/// assert_eq!(io.map(std::io::Error::kind), Some(std::io::ErrorKind::ConnectionRefused));
/// ```
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// The cause `error`, kept as it is.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The error itself, to inspect or downcast.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

/// A cause that is only a message.
#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

impl From<String> for Cause {
    fn from(message: String) -> Self {
        Self::new(Message(message))
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        Self::new(Message(message.to_owned()))
    }
}

/// Everything that can keep a guarded call from producing its own result.
///
/// One type for every front end and every store, so a service converts it once
/// (`impl From<idempotency_core::Error> for MyError`). Two groups of variants:
///
/// - **What the record says** about a duplicate: [`InFlight`](Self::InFlight),
///   [`Mismatch`](Self::Mismatch), and for state machines
///   [`IllegalTransition`](Self::IllegalTransition) and [`NotFound`](Self::NotFound); and
///   [`Key`](Self::Key) for a key that cannot be used.
/// - **What the store did**: [`Unavailable`](Self::Unavailable) and [`Timeout`](Self::Timeout)
///   (front ends answer 503 / `UNAVAILABLE`), [`LeaseLost`](Self::LeaseLost) (a stale owner was
///   refused by its fencing token), [`CapacityExceeded`](Self::CapacityExceeded),
///   [`Codec`](Self::Codec), [`Config`](Self::Config) and [`Backend`](Self::Backend).
///
/// With the `axum` feature it is an `IntoResponse` (RFC 9457 problem+json with the statuses of
/// [`Error::http_status`]); with the `tonic` feature it converts into a `tonic::Status`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// Another call with the same key is running; retry later.
    InFlight {
        /// A hint for when to retry.
        retry_after: Duration,
    },
    /// The key was first used with another payload (fingerprint).
    Mismatch,
    /// The key is unusable (missing, empty, too long, not visible ASCII).
    Key(KeyError),
    /// State machines: the row is in a state the transition does not start from.
    IllegalTransition {
        /// The state the row is in.
        current: String,
    },
    /// State machines: no row has the given id.
    NotFound,
    /// The backend could not be reached or failed to answer (connection refused, reset, I/O).
    Unavailable(Cause),
    /// The backend did not answer within the configured time.
    Timeout(Duration),
    /// The caller's fencing token is no longer current: the lease expired and another owner took
    /// the key over, or the record is gone. The write was not applied.
    LeaseLost,
    /// The store is full and holds no expired record to evict.
    CapacityExceeded(usize),
    /// A stored record could not be decoded, or a value could not be encoded.
    Codec(Cause),
    /// The store was configured wrongly (for example a table name that is not an identifier).
    Config(String),
    /// Any other backend error.
    Backend(Cause),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InFlight { retry_after } => write!(
                f,
                "a call with the same idempotency key is in flight; retry in {retry_after:?}"
            ),
            Self::Mismatch => {
                f.write_str("the idempotency key was already used with another payload")
            }
            Self::Key(error) => write!(f, "invalid idempotency key: {error}"),
            Self::IllegalTransition { current } => {
                write!(f, "illegal state transition: the row is {current:?}")
            }
            Self::NotFound => f.write_str("no row to transition has this id"),
            Self::Unavailable(cause) => write!(f, "store unavailable: {cause}"),
            Self::Timeout(limit) => write!(f, "store timed out after {limit:?}"),
            Self::LeaseLost => f.write_str("lease lost: the fencing token is stale"),
            Self::CapacityExceeded(records) => {
                write!(f, "store capacity of {records} records reached")
            }
            Self::Codec(cause) => write!(f, "idempotency codec error: {cause}"),
            Self::Config(message) => write!(f, "store misconfigured: {message}"),
            Self::Backend(cause) => write!(f, "store backend error: {cause}"),
        }
    }
}

impl std::error::Error for Error {
    /// The driver's error behind [`Unavailable`](Self::Unavailable), [`Codec`](Self::Codec) and
    /// [`Backend`](Self::Backend) (downcast it to `sqlx::Error`, `redis::RedisError`, …), or the
    /// [`KeyError`].
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unavailable(cause) | Self::Codec(cause) | Self::Backend(cause) => {
                Some(cause.get())
            }
            Self::Key(error) => Some(error),
            _ => None,
        }
    }
}

impl From<KeyError> for Error {
    fn from(error: KeyError) -> Self {
        Self::Key(error)
    }
}

/// The name backends use for [`Error`]: a [`Store`](crate::Store) answers with it.
pub type StoreError = Error;

impl Error {
    /// Whether the store may succeed later (it is down, slow or full, or aborted the
    /// transaction), as opposed to a refusal or a configuration or data error.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Timeout(_) | Self::CapacityExceeded(_) | Self::Backend(_)
        )
    }

    /// Whether the same call may succeed later: in flight, or a transient store error.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::InFlight { .. }) || self.is_transient()
    }

    /// When to retry, where a retry may succeed: the in-flight hint, or 1 s for a transient
    /// store error.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InFlight { retry_after } => Some(*retry_after),
            _ if self.is_transient() => Some(Duration::from_secs(1)),
            _ => None,
        }
    }

    /// The HTTP status that answers this error: 409 in flight or an illegal transition or a
    /// lost lease, 422 mismatch, 400 key, 404 not found, 503 unavailable, timed out or full,
    /// 500 otherwise.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::InFlight { .. } | Self::IllegalTransition { .. } | Self::LeaseLost => 409,
            Self::Mismatch => 422,
            Self::Key(_) => 400,
            Self::NotFound => 404,
            Self::Unavailable(_) | Self::Timeout(_) | Self::CapacityExceeded(_) => 503,
            Self::Codec(_) | Self::Config(_) | Self::Backend(_) => 500,
        }
    }

    /// A short, stable slug for problem `type` URIs and metric labels.
    pub fn slug(&self) -> &'static str {
        match self {
            Self::InFlight { .. } => "in-flight",
            Self::Mismatch => "key-reused",
            Self::Key(_) => "invalid-key",
            Self::IllegalTransition { .. } => "illegal-transition",
            Self::NotFound => "not-found",
            Self::Unavailable(_) | Self::Timeout(_) | Self::CapacityExceeded(_) => {
                "store-unavailable"
            }
            Self::LeaseLost => "lease-lost",
            Self::Codec(_) | Self::Config(_) | Self::Backend(_) => "internal",
        }
    }
}

#[cfg(feature = "axum")]
mod axum_response {
    use axum_core::response::{IntoResponse, Response};
    use http::{HeaderValue, StatusCode, header};

    use super::Error;

    impl IntoResponse for Error {
        /// RFC 9457 `application/problem+json`, typed `urn:idempotency:<slug>`, with
        /// `Retry-After` where a retry may succeed. Internal errors are logged, and their
        /// detail is not sent.
        fn into_response(self) -> Response {
            let status = StatusCode::from_u16(self.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let detail = if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
                tracing::error!(error = %self, "idempotency error");
                "internal error".to_owned()
            } else {
                self.to_string()
            };
            let body = serde_json::json!({
                "type": format!("urn:idempotency:{}", self.slug()),
                "title": status.canonical_reason().unwrap_or("Error"),
                "status": status.as_u16(),
                "detail": detail,
            });
            let mut response = (status, body.to_string()).into_response();
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
            if let Some(after) = self.retry_after() {
                let secs = (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1);
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            response
        }
    }
}

#[cfg(feature = "tonic")]
impl From<Error> for tonic::Status {
    /// `ABORTED` in flight, `FAILED_PRECONDITION` mismatch or illegal transition,
    /// `INVALID_ARGUMENT` key, `NOT_FOUND`, `UNAVAILABLE` for a store that may answer later,
    /// `INTERNAL` otherwise.
    fn from(error: Error) -> Self {
        use tonic::Code;
        let code = match &error {
            Error::InFlight { .. } => Code::Aborted,
            Error::Mismatch | Error::IllegalTransition { .. } | Error::LeaseLost => {
                Code::FailedPrecondition
            }
            Error::Key(_) => Code::InvalidArgument,
            Error::NotFound => Code::NotFound,
            _ if error.is_transient() => Code::Unavailable,
            _ => Code::Internal,
        };
        tonic::Status::new(code, error.to_string())
    }
}
