//! What a run with steps checkpointed on its record: the input a resume needs, each completed
//! step's result, and the answer a step ended the run with.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// The checkpoints of a run with **steps** (crate `idempotency-steps`), kept on its record
/// ([`Record::progress`](crate::Record::progress)) so that a retry, a takeover or the completer
/// resumes after the last completed step and never runs one again.
///
/// ```
/// use idempotency_core::{Progress, StepResult};
///
/// let mut progress = Progress::new(b"{\"order_id\":7}".to_vec());
/// progress.steps.push(StepResult::new("reserve", serde_json::json!({"reserved": true})));
/// let decoded = Progress::decode(&progress.encode())?;
/// assert_eq!(decoded.stopped_at(), Some("reserve"));
/// # Ok::<(), idempotency_core::StoreError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// What the run was started with, as its front end keeps it for a resume without the
    /// client (an HTTP request's method, path and body; size-limited, filtered by the front
    /// end's input policy).
    #[serde(with = "base64_bytes")]
    pub input: Bytes,
    /// The completed steps, in the order they ran.
    pub steps: Vec<StepResult>,
    /// The answer a step ended the run with (a declined card's 402), stored once the completed
    /// steps before it are compensated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<Ending>,
}

/// One completed step: its name and the result it returned, checkpointed with its effects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepResult {
    /// The step's name, unique within its run.
    pub name: String,
    /// What the step returned, as JSON.
    pub result: serde_json::Value,
    /// Whether its compensation ran (after a later step ended the run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compensated: bool,
}

/// The answer a step ended its run with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// The step that ended the run.
    pub step: String,
    /// What it answered, as JSON (the front end turns it into its response).
    pub answer: serde_json::Value,
}

impl StepResult {
    /// A completed step named `name` that returned `result`.
    pub fn new(name: impl Into<String>, result: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            result,
            compensated: false,
        }
    }
}

impl Progress {
    /// The progress of a run started with `input`, no step completed yet.
    pub fn new(input: impl Into<Bytes>) -> Self {
        Self {
            input: input.into(),
            steps: Vec::new(),
            ending: None,
        }
    }

    /// The completed step named `name`.
    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|step| step.name == name)
    }

    /// Where the run stopped: the step that ended it, else the last completed step.
    pub fn stopped_at(&self) -> Option<&str> {
        match &self.ending {
            Some(ending) => Some(&ending.step),
            None => self.steps.last().map(|step| step.name.as_str()),
        }
    }

    /// The bytes a store keeps (JSON).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes)
            .map_err(|error| StoreError::Codec(format!("progress: {error}").into()))
    }
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        bytes: &Bytes,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Bytes, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
    }
}
