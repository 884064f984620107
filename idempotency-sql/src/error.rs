//! Driver errors as the toolkit's errors.

use idempotency_core::{Cause, Error};

/// The toolkit's [`Error`] for a sqlx error, kept as its source ([`Cause`]): lost or refused
/// connections are [`Error::Unavailable`] (front ends answer 503 and the pool reconnects by
/// itself), decoding problems [`Error::Codec`], a bad configuration [`Error::Config`], the
/// rest [`Error::Backend`].
///
/// ```
/// use idempotency_core::Error;
///
/// let error = idempotency_sql::from_sqlx(sqlx::Error::PoolTimedOut);
/// assert!(matches!(error, Error::Unavailable(_)));
/// let source = std::error::Error::source(&error);
/// assert!(source.is_some_and(|source| source.is::<sqlx::Error>()));
/// ```
pub fn from_sqlx(error: sqlx::Error) -> Error {
    use sqlx::Error as E;
    match error {
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => {
            Error::Unavailable(Cause::new(error))
        }
        E::Protocol(_) => Error::Unavailable(Cause::new(error)),
        E::Configuration(_) => Error::Config(error.to_string()),
        E::ColumnDecode { .. }
        | E::Decode(_)
        | E::Encode(_)
        | E::ColumnNotFound(_)
        | E::ColumnIndexOutOfBounds { .. } => Error::Codec(Cause::new(error)),
        E::Database(ref db) => {
            let code = db.code().map(|code| code.into_owned()).unwrap_or_default();
            // SQLSTATE class 08: connection exceptions; 57P01-57P03: the server shut the
            // session down (pg_terminate_backend, restart); MySQL reports lost servers as 08S01.
            if code.starts_with("08") || matches!(code.as_str(), "57P01" | "57P02" | "57P03") {
                Error::Unavailable(Cause::new(error))
            } else {
                Error::Backend(Cause::new(error))
            }
        }
        other => Error::Backend(Cause::new(other)),
    }
}
