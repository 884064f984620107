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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The run's storage key.
    pub key: StorageKey,
    /// What the run's key was first used with.
    pub fingerprint: Fingerprint,
}

/// The request as a run keeps it.
#[derive(Serialize, Deserialize)]
pub(crate) struct Input {
    pub(crate) method: String,
    pub(crate) uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) content_type: Option<String>,
    pub(crate) body: String,
}

impl Input {
    /// The kept form of a request's head and body.
    pub(crate) fn encode(parts: &http::request::Parts, body: &Bytes) -> Bytes {
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
        };
        Bytes::from(serde_json::to_vec(&input).unwrap_or_default())
    }

    /// The request a resume sends, marked with `resume`; `None` if `kept` does not decode.
    pub(crate) fn request<B: From<Bytes>>(kept: &[u8], resume: Resume) -> Option<http::Request<B>> {
        let input: Self = serde_json::from_slice(kept).ok()?;
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
