//! How a step fails: it ends the run with an answer, it may succeed later, or the store failed.

use idempotency_core::Error;

/// Why a step returned no result.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The step ended the run with this answer (a declined card): checkpointed, answered again
    /// by every resume, stored once the completed steps before it are compensated.
    #[error("the run ended at a step: {0}")]
    End(serde_json::Value),
    /// The step may succeed later (a provider that timed out or answered 503): the run stays
    /// resumable, by a retry or by the completer.
    #[error("the step may succeed later: {0}")]
    Retry(String),
    /// The store failed, or the run was taken over by another owner ([`Error::LeaseLost`]):
    /// nothing after the last checkpoint counts.
    #[error(transparent)]
    Store(#[from] Error),
}

impl StepError {
    /// Ends the run with `answer` (serialized as JSON).
    pub fn end(answer: impl serde::Serialize) -> Self {
        Self::End(serde_json::to_value(answer).unwrap_or(serde_json::Value::Null))
    }

    /// A failure that may pass: the run stays resumable.
    pub fn retry(reason: impl std::fmt::Display) -> Self {
        Self::Retry(reason.to_string())
    }
}

#[cfg(feature = "sql")]
impl From<sqlx::Error> for StepError {
    fn from(error: sqlx::Error) -> Self {
        Self::Store(idempotency_sql::from_sqlx(error))
    }
}
