//! What the business code of a [`SqlTruth`](super::SqlTruth) is given for a job.

use serde::de::DeserializeOwned;

use crate::Job;

/// What the business code receives for a job: the [`Job`] itself, or its payload decoded
/// ([`Json`]). A payload that cannot be decoded can never be handled: the message is rejected
/// (dead-lettered), nothing is claimed and nothing runs.
pub trait FromJob: Sized + Send + 'static {
    /// Reads the input from `job`; `Err` says why the message can never be handled.
    fn from_job(job: &Job) -> Result<Self, String>;
}

impl FromJob for Job {
    fn from_job(job: &Job) -> Result<Self, String> {
        Ok(job.clone())
    }
}

/// The message's payload, decoded from JSON into `T` (read once, where the key was read).
///
/// ```
/// use idempotency_core::{Fingerprint, IdempotencyKey};
/// use idempotency_queue::two_tier::{FromJob, Json};
/// use idempotency_queue::{Job, Message};
///
/// #[derive(serde::Deserialize)]
/// struct Paid { trade_no: String, user_id: u64 }
///
/// let job = |payload: &'static str| Job {
///     key: IdempotencyKey::parse("T1").unwrap(),
///     message: Message::new(payload),
///     fingerprint: Fingerprint::of_bytes(payload.as_bytes()),
///     lease: None,
/// };
/// let Json(paid) = Json::<Paid>::from_job(&job(r#"{"trade_no":"T1","user_id":7}"#)).unwrap();
/// assert_eq!((paid.trade_no.as_str(), paid.user_id), ("T1", 7));
/// assert!(Json::<Paid>::from_job(&job("not json")).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned + Send + 'static> FromJob for Json<T> {
    fn from_job(job: &Job) -> Result<Self, String> {
        serde_json::from_slice(job.message.payload())
            .map(Json)
            .map_err(|error| format!("the payload is not the JSON the handler reads: {error}"))
    }
}
