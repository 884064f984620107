//! gRPC refusals: trailers-only responses carrying a `grpc-status`.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::refusal::{Refusal, RefusalKind, RenderRefusal};

/// Renders refusals as gRPC statuses, the way a gRPC server answers an error: HTTP 200, a
/// trailers-only response (`content-type: application/grpc`, `grpc-status`, percent-encoded
/// `grpc-message`, no body) plus `retry-after` metadata where the refusal carries a hint.
///
/// | refusal | `grpc-status` |
/// |---|---|
/// | missing or invalid key, unreadable body | `INVALID_ARGUMENT` (3) |
/// | body too large | `RESOURCE_EXHAUSTED` (8) |
/// | in flight | `ABORTED` (10) |
/// | key reused with another payload | `FAILED_PRECONDITION` (9) |
/// | store unavailable | `UNAVAILABLE` (14) |
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcStatus;

impl GrpcStatus {
    /// The gRPC status code for a refusal.
    pub fn code(kind: RefusalKind) -> u16 {
        match kind {
            RefusalKind::MissingKey | RefusalKind::InvalidKey | RefusalKind::MalformedBody => 3,
            RefusalKind::BodyTooLarge => 8,
            RefusalKind::InFlight => 10,
            RefusalKind::Mismatch => 9,
            RefusalKind::StoreUnavailable => 14,
        }
    }
}

impl RenderRefusal for GrpcStatus {
    fn render(&self, refusal: &Refusal) -> Response<Bytes> {
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        headers.insert("grpc-status", HeaderValue::from(Self::code(refusal.kind)));
        if let Ok(message) = HeaderValue::from_str(&percent_encode(&refusal.detail)) {
            headers.insert("grpc-message", message);
        }
        if let Some(secs) = refusal.retry_after_secs() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// gRPC's `grpc-message` encoding: bytes outside `0x20..=0x7E`, and `%`, as `%XX`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &byte in message.as_bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn refusals_are_trailers_only_grpc_statuses() {
        let cases = [
            (RefusalKind::MissingKey, "3"),
            (RefusalKind::InvalidKey, "3"),
            (RefusalKind::BodyTooLarge, "8"),
            (RefusalKind::InFlight, "10"),
            (RefusalKind::Mismatch, "9"),
            (RefusalKind::StoreUnavailable, "14"),
        ];
        for (kind, code) in cases {
            let response = GrpcStatus.render(&Refusal::new(kind, "100% busy \u{e9}"));
            assert_eq!(response.status(), StatusCode::OK);
            assert!(response.body().is_empty(), "trailers-only");
            assert_eq!(response.headers()["content-type"], "application/grpc");
            assert_eq!(response.headers()["grpc-status"], code);
            assert_eq!(response.headers()["grpc-message"], "100%25 busy %C3%A9");
        }
        let busy = GrpcStatus.render(
            &Refusal::new(RefusalKind::InFlight, "x").with_retry_after(Duration::from_secs(3)),
        );
        assert_eq!(busy.headers()["retry-after"], "3");
    }
}
