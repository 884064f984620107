//! A body parsed as JSON at most once, when first needed.

use bytes::Bytes;
use serde_json::Value;

pub(crate) struct LazyJson<'a> {
    bytes: &'a Bytes,
    parsed: Option<Result<Value, String>>,
}

impl<'a> LazyJson<'a> {
    pub(crate) fn new(bytes: &'a Bytes) -> Self {
        Self {
            bytes,
            parsed: None,
        }
    }

    /// The parsed body, or why it is not JSON.
    pub(crate) fn get(&mut self) -> Result<&Value, String> {
        let bytes = self.bytes;
        self.parsed
            .get_or_insert_with(|| {
                serde_json::from_slice(bytes)
                    .map_err(|error| format!("the body is not valid JSON: {error}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}
