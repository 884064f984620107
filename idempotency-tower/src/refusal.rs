//! The layer's own refusals, and how they are rendered.
//!
//! Refusals are never stored: a retry after a refusal is judged afresh.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

/// Why the layer answered instead of the handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// The endpoint requires a key and none was sent (HTTP 400, gRPC `INVALID_ARGUMENT`).
    MissingKey,
    /// The key is malformed: empty, too long, non-visible-ASCII, or sent twice (400).
    InvalidKey,
    /// The body could not be read where the key or fingerprint needs it: malformed JSON, a key
    /// field of the wrong type, or a body stream error (400).
    MalformedBody,
    /// The body is larger than the layer reads (413, gRPC `RESOURCE_EXHAUSTED`).
    BodyTooLarge,
    /// The body the layer reads did not arrive within its read timeout (408, gRPC
    /// `DEADLINE_EXCEEDED`): nothing was claimed, so a slow sender pins no key.
    BodyTimeout,
    /// The request failed the layer's verification, run before its key is claimed: a
    /// callback's signature does not match (401, gRPC `UNAUTHENTICATED`).
    Unverified,
    /// The layer scopes keys per principal and the request carries none (no authenticated
    /// identity in its extensions, an unreadable principal header): it is refused rather than
    /// folded into a shared scope (401, gRPC `UNAUTHENTICATED`).
    Unauthenticated,
    /// Too many handlers of departed clients are still finishing in the background: new guarded
    /// requests are refused until some end, rather than any running handler being abandoned
    /// (503 + `Retry-After`, gRPC `UNAVAILABLE`).
    Overloaded,
    /// The first request with this key is still running (409 + `Retry-After`, gRPC `ABORTED`).
    InFlight,
    /// The key was first used with another payload (422, gRPC `FAILED_PRECONDITION`).
    Mismatch,
    /// The store failed or timed out and the layer fails closed (503 + `Retry-After`,
    /// gRPC `UNAVAILABLE`).
    StoreUnavailable,
    /// A one-time token is missing, unknown, expired or already used ([`crate::TokenLayer`]):
    /// the form was already submitted (409, gRPC `FAILED_PRECONDITION`).
    TokenRejected,
    /// The first request with this key completed, but its response could not be stored for
    /// replay (larger than the stored-response bounds). The key stays taken, so the work never
    /// runs twice; a retry learns that it was done (409, gRPC `ALREADY_EXISTS`).
    NotReplayable,
    // Last, so that `COUNT` counts every kind: a new kind goes above.
    /// Transactional HTTP: the handler asked for the request's transaction where there is none
    /// (a route without the transactional layer, or asked twice), or kept it past its answer.
    /// Nothing was committed (500, gRPC `INTERNAL`).
    TransactionUnavailable,
}

impl RefusalKind {
    /// How many kinds there are: the last one's index, plus one (a kind's index is
    /// `kind as usize`).
    pub(crate) const COUNT: usize = Self::TransactionUnavailable as usize + 1;

    /// The HTTP status of this refusal.
    pub fn status(self) -> StatusCode {
        match self {
            Self::MissingKey | Self::InvalidKey | Self::MalformedBody => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Unverified | Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::TransactionUnavailable => StatusCode::INTERNAL_SERVER_ERROR,
            Self::InFlight | Self::TokenRejected | Self::NotReplayable => StatusCode::CONFLICT,
            Self::Mismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Self::StoreUnavailable | Self::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// A short, stable title (the problem's `title`).
    pub fn title(self) -> &'static str {
        match self {
            Self::MissingKey => "Idempotency key missing",
            Self::InvalidKey => "Idempotency key invalid",
            Self::MalformedBody => "Request body unreadable",
            Self::BodyTooLarge => "Request body too large",
            Self::BodyTimeout => "Request body too slow",
            Self::Unverified => "Request not verified",
            Self::Unauthenticated => "Principal missing",
            Self::InFlight => "Request in progress",
            Self::Mismatch => "Idempotency key reused",
            Self::StoreUnavailable => "Idempotency store unavailable",
            Self::Overloaded => "Too many unfinished handlers",
            Self::TokenRejected => "One-time token rejected",
            Self::NotReplayable => "Response not replayable",
            Self::TransactionUnavailable => "Transaction unavailable",
        }
    }

    /// A stable slug, used in problem `type` URIs and as the metrics label.
    pub fn slug(self) -> &'static str {
        match self {
            Self::MissingKey => "missing-key",
            Self::InvalidKey => "invalid-key",
            Self::MalformedBody => "malformed-body",
            Self::BodyTooLarge => "body-too-large",
            Self::BodyTimeout => "body-timeout",
            Self::Unverified => "unverified",
            Self::Unauthenticated => "unauthenticated",
            Self::InFlight => "in-flight",
            Self::Mismatch => "key-reused",
            Self::StoreUnavailable => "store-unavailable",
            Self::Overloaded => "overloaded",
            Self::TokenRejected => "token-rejected",
            Self::NotReplayable => "not-replayable",
            Self::TransactionUnavailable => "transaction-unavailable",
        }
    }
}

/// A refusal: its kind, a human-readable detail and, where the client should retry, when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// What happened.
    pub kind: RefusalKind,
    /// An explanation for this occurrence (the problem's `detail`).
    pub detail: String,
    /// For [`RefusalKind::InFlight`] and [`RefusalKind::StoreUnavailable`]: when to retry.
    pub retry_after: Option<Duration>,
}

impl Refusal {
    /// A refusal without a retry hint.
    pub fn new(kind: RefusalKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// The same refusal with a retry hint.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The retry hint in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|after| after.as_secs() + u64::from(after.subsec_nanos() > 0))
            .map(|secs| secs.max(1))
    }
}

/// Turns a [`Refusal`] into a response. Implemented for [`ProblemJson`] (the HTTP default),
/// `GrpcStatus` (feature `grpc`) and any `Fn(&Refusal) -> Response<Bytes>`.
pub trait RenderRefusal: Send + Sync + 'static {
    /// The response for `refusal`.
    fn render(&self, refusal: &Refusal) -> Response<Bytes>;
}

impl<F> RenderRefusal for F
where
    F: Fn(&Refusal) -> Response<Bytes> + Send + Sync + 'static,
{
    fn render(&self, refusal: &Refusal) -> Response<Bytes> {
        self(refusal)
    }
}

/// RFC 9457 `application/problem+json` bodies (`type`, `title`, `status`, `detail`), with
/// `Retry-After` where the refusal carries a hint.
///
/// `type` is `<base><slug>` (for example `urn:idempotency:in-flight`); set your documentation
/// URL as the base with [`ProblemJson::with_type_base`].
#[derive(Clone, Debug)]
pub struct ProblemJson {
    type_base: String,
}

impl Default for ProblemJson {
    fn default() -> Self {
        Self {
            type_base: "urn:idempotency:".to_owned(),
        }
    }
}

impl ProblemJson {
    /// Problems typed `urn:idempotency:<slug>`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Problems typed `<base><slug>`, e.g. `https://api.example.com/problems/`.
    pub fn with_type_base(mut self, base: impl Into<String>) -> Self {
        self.type_base = base.into();
        self
    }
}

impl RenderRefusal for ProblemJson {
    fn render(&self, refusal: &Refusal) -> Response<Bytes> {
        let status = refusal.kind.status();
        let body = serde_json::json!({
            "type": format!("{}{}", self.type_base, refusal.kind.slug()),
            "title": refusal.kind.title(),
            "status": status.as_u16(),
            "detail": refusal.detail,
        });
        let mut response = Response::new(Bytes::from(body.to_string()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = refusal.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn renders_problem_json_with_retry_after() {
        let refusal = Refusal::new(RefusalKind::InFlight, "still running")
            .with_retry_after(Duration::from_millis(1500));
        let response = ProblemJson::new().render(&refusal);
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        assert_eq!(response.headers()["retry-after"], "2");
        let body: serde_json::Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["type"], "urn:idempotency:in-flight");
        assert_eq!(body["status"], 409);
        assert_eq!(body["title"], "Request in progress");
        assert_eq!(body["detail"], "still running");
    }

    #[test]
    fn statuses_match_the_contract() {
        use RefusalKind::*;
        let statuses: Vec<u16> = [
            MissingKey,
            InvalidKey,
            MalformedBody,
            BodyTooLarge,
            InFlight,
            Mismatch,
            StoreUnavailable,
        ]
        .iter()
        .map(|k| k.status().as_u16())
        .collect();
        assert_eq!(statuses, [400, 400, 400, 413, 409, 422, 503]);
        let plain = ProblemJson::new()
            .with_type_base("https://api.example.com/problems/")
            .render(&Refusal::new(Mismatch, "x"));
        assert!(!plain.headers().contains_key("retry-after"));
        let body: serde_json::Value = serde_json::from_slice(plain.body()).unwrap();
        assert_eq!(body["type"], "https://api.example.com/problems/key-reused");
    }
}
