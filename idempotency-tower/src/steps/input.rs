//! What a run keeps of its request for a resume without the client, and how the completer's
//! resumed request is marked.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use idempotency_core::{Fingerprint, StorageKey};
use serde::{Deserialize, Serialize};

/// What a run keeps of its request body for a resume without the client: the body as it is
/// (the default), or what this function leaves of it (personal data taken out). A handler
/// resumed by the completer gets the kept body.
pub type KeepInput = std::sync::Arc<dyn Fn(&Bytes) -> Bytes + Send + Sync>;

/// The extension that marks a request the completer sends to resume a run: the layer resumes
/// the run of `key` (used with `fingerprint`) instead of reading a key from the request.
/// Extensions never come from the network, so no client can send one.
///
/// The handler sees it too: a resumed request carries no credentials (only the method, path,
/// content type and kept body), so the caller the run was started for is `principal`. Give the
/// completer the service inside your authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The run's storage key.
    pub key: StorageKey,
    /// What the run's key was first used with.
    pub fingerprint: Fingerprint,
    /// The principal the run's key was scoped to (`None` with a shared scope).
    pub principal: Option<String>,
}

/// The request as a run keeps it.
#[derive(Serialize, Deserialize)]
pub(crate) struct Input {
    pub(crate) method: String,
    pub(crate) uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) content_type: Option<String>,
    pub(crate) body: String,
    /// The principal the run's key was scoped to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) principal: Option<String>,
}

impl Input {
    /// The kept form of a request's head and body, started for `principal`.
    pub(crate) fn encode(
        parts: &http::request::Parts,
        body: &Bytes,
        principal: Option<String>,
    ) -> Bytes {
        let input = Self {
            method: parts.method.to_string(),
            uri: parts
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), ToString::to_string),
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body: STANDARD.encode(body),
            principal,
        };
        Bytes::from(serde_json::to_vec(&input).unwrap_or_default())
    }

    /// The request a resume sends, marked with `resume`; `None` if `kept` does not decode.
    pub(crate) fn request<B: From<Bytes>>(
        kept: &[u8],
        mut resume: Resume,
    ) -> Option<http::Request<B>> {
        let input: Self = serde_json::from_slice(kept).ok()?;
        resume.principal = input.principal;
        let body = STANDARD.decode(&input.body).ok()?;
        let mut builder = http::Request::builder()
            .method(input.method.as_str())
            .uri(input.uri.as_str());
        if let Some(content_type) = &input.content_type {
            builder = builder.header(http::header::CONTENT_TYPE, content_type);
        }
        let mut request = builder.body(B::from(Bytes::from(body))).ok()?;
        request.extensions_mut().insert(resume);
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The completer's request carries the kept head and body, and the principal the run was
    /// started for, not the original credentials.
    #[test]
    fn a_resumed_request_carries_the_runs_principal() {
        let (parts, ()) = http::Request::post("/checkout?x=1")
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::AUTHORIZATION, "Bearer secret")
            .body(())
            .map(|request| request.into_parts())
            .unwrap_or_else(|_| unreachable!("a valid request"));
        let kept = Input::encode(&parts, &Bytes::from_static(b"{}"), Some("tenant-a".into()));
        let resume = Resume {
            key: StorageKey([7; 32]),
            fingerprint: Fingerprint([1; 32]),
            principal: None,
        };
        let request = Input::request::<Bytes>(&kept, resume).expect("the kept input decodes");
        assert_eq!(request.uri(), "/checkout?x=1");
        assert_eq!(request.body(), &Bytes::from_static(b"{}"));
        assert!(request.headers().get(http::header::AUTHORIZATION).is_none());
        let resume = request.extensions().get::<Resume>().expect("marked");
        assert_eq!(resume.principal.as_deref(), Some("tenant-a"));
    }
}
