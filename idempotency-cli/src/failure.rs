//! Why a command failed, and the exit code each reason gives.

use std::process::ExitCode;

use idempotency_core::StoreError;

/// A failed command.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad input, or a destructive action not confirmed: exit 2.
    Usage(String),
    /// The fence refused the action (the record moved on, is absent or not in progress): exit 3.
    Refused(String),
    /// The store did not answer: exit 4.
    Unreachable(String),
    /// What was named is not there (no record for the key, no such message, no record table
    /// or no key under the prefix to scan): exit 5.
    NotFound(String),
    /// What was named fits several records (a shortened id, a raw key written by several
    /// front ends): exit 6, with each one's id to choose from.
    Ambiguous(String),
    /// Anything else: exit 1.
    Other(String),
}

impl Failure {
    /// The process's exit code.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Other(_) => 1,
            Self::Usage(_) => 2,
            Self::Refused(_) => 3,
            Self::Unreachable(_) => 4,
            Self::NotFound(_) => 5,
            Self::Ambiguous(_) => 6,
        })
    }

    /// What to tell the operator.
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::Usage(text)
            | Self::Refused(text)
            | Self::Unreachable(text)
            | Self::NotFound(text)
            | Self::Ambiguous(text)
            | Self::Other(text) => text,
        }
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(_) | StoreError::Timeout(_) => {
                Self::Unreachable(format!("store unreachable: {error}"))
            }
            StoreError::Config(_) | StoreError::Key(_) => Self::Usage(error.to_string()),
            other => Self::Other(other.to_string()),
        }
    }
}

/// A connection error of sqlx: a bad URL is usage, anything else unreachable.
#[cfg(feature = "sql")]
pub(crate) fn sqlx_failure(error: sqlx::Error) -> Failure {
    match error {
        sqlx::Error::Configuration(_) => Failure::Usage(format!("bad store URL: {error}")),
        other => Failure::Unreachable(format!("store unreachable: {other}")),
    }
}
