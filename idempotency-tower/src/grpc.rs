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
/// | body too slow | `DEADLINE_EXCEEDED` (4) |
/// | in flight | `ABORTED` (10) |
/// | key reused with another payload | `FAILED_PRECONDITION` (9) |
/// | store unavailable, too many unfinished handlers | `UNAVAILABLE` (14) |
/// | completed, response too large to replay | `ALREADY_EXISTS` (6) |
/// | not verified (a bad signature), no principal | `UNAUTHENTICATED` (16) |
/// | no transaction for a transactional handler | `INTERNAL` (13) |
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcStatus;

impl GrpcStatus {
    /// The gRPC status code for a refusal.
    pub fn code(kind: RefusalKind) -> u16 {
        match kind {
            RefusalKind::MissingKey | RefusalKind::InvalidKey | RefusalKind::MalformedBody => 3,
            RefusalKind::BodyTooLarge => 8,
            RefusalKind::BodyTimeout => 4,
            RefusalKind::InFlight => 10,
            RefusalKind::Mismatch | RefusalKind::TokenRejected => 9,
            RefusalKind::StoreUnavailable | RefusalKind::Overloaded => 14,
            RefusalKind::NotReplayable => 6,
            RefusalKind::Unverified | RefusalKind::Unauthenticated => 16,
            RefusalKind::TransactionUnavailable => 13,
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

/// Whether a collected gRPC request body holds exactly one length-prefixed message, as a unary
/// call's does (a client-streaming call may hold several, or none).
pub(crate) fn is_single_message(body: &[u8]) -> bool {
    let Some(header) = body.get(..5) else {
        return false;
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    body.len() - 5 == len
}

/// Whether a content type is gRPC proper (`application/grpc`, `application/grpc+proto`, …), not
/// gRPC-Web (whose trailers travel in the body).
pub(crate) fn is_grpc_content_type(content_type: &[u8]) -> bool {
    match content_type.strip_prefix(b"application/grpc") {
        Some(rest) => rest.is_empty() || rest[0] == b'+' || rest[0] == b';',
        None => false,
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
    fn recognises_unary_bodies_and_grpc_content_types() {
        assert!(is_single_message(&[0, 0, 0, 0, 2, 8, 1]));
        assert!(is_single_message(&[0, 0, 0, 0, 0]));
        assert!(!is_single_message(&[0, 0, 0, 0, 1, 8, 0, 0, 0, 0, 1, 9]));
        assert!(!is_single_message(&[0, 0, 0, 0, 3, 8]));
        assert!(!is_single_message(&[]));
        assert!(is_grpc_content_type(b"application/grpc"));
        assert!(is_grpc_content_type(b"application/grpc+proto"));
        assert!(!is_grpc_content_type(b"application/grpc-web"));
        assert!(!is_grpc_content_type(b"application/json"));
    }

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
