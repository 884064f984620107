//! Which records an operation looks at.

use std::time::{Duration, SystemTime};

use super::Status;
use idempotency_core::{Record, RecordState};

/// The setters every filter of records has alike, for a struct with the fields `namespace:
/// Option<String>`, `updated_from` and `updated_before: Option<SystemTime>`: this crate's
/// [`Query`] and the SQL stores' `ListFilter`. A macro, as they are inherent methods of two
/// types in two crates. Not part of the API: its name and shape may change in any release.
#[doc(hidden)]
#[macro_export]
macro_rules! __record_filter_setters {
    () => {
        /// Only `namespace`.
        pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
            self.namespace = Some(namespace.into());
            self
        }

        /// Only records last written at or after `from`.
        pub fn updated_from(mut self, from: std::time::SystemTime) -> Self {
            self.updated_from = Some(from);
            self
        }

        /// Only records last written before `before`.
        pub fn updated_before(mut self, before: std::time::SystemTime) -> Self {
            self.updated_before = Some(before);
            self
        }
    };
}

/// Which records to list, count or purge: by namespace, status, last update, attempts and
/// conflicts. Every condition set must hold.
///
/// ```
/// use idempotency_operations::{Query, Status};
/// use std::time::Duration;
///
/// // What `idempotency stuck --older-than 10m` looks for in one namespace.
/// let stuck = Query::stuck(Some(Duration::from_secs(600))).namespace("payments.callback");
/// let completed = Query::all().status(Status::Completed).min_attempts(2);
/// // What `idempotency conflicts` lists: records that met a conflicting duplicate.
/// let conflicted = Query::all().min_conflicts(1);
/// # let _ = (stuck, completed, conflicted);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only these statuses (none: every status).
    pub statuses: Vec<Status>,
    /// Also in-progress records last written before this time, whatever their lease (see
    /// [`Query::stuck`]).
    pub in_progress_before: Option<SystemTime>,
    /// Only records last written at or after this time.
    pub updated_from: Option<SystemTime>,
    /// Only records last written before this time.
    pub updated_before: Option<SystemTime>,
    /// Only records claimed at least this many times.
    pub min_attempts: Option<u32>,
    /// Only records that met at least this many conflicting duplicates
    /// ([`Record::conflicts`]).
    pub min_conflicts: Option<u32>,
}

impl Query {
    /// Every record.
    pub fn all() -> Self {
        Self::default()
    }

    /// Stuck records: abandoned ones (the lease ended), and, given `older_than`, in-progress
    /// records last written longer ago than that, live lease or not (a handler that hangs
    /// while its keep-alive still runs).
    pub fn stuck(older_than: Option<Duration>) -> Self {
        Self {
            statuses: vec![Status::Abandoned],
            in_progress_before: older_than.map(|age| SystemTime::now() - age),
            ..Self::default()
        }
    }

    __record_filter_setters!();

    /// Also records of `status` (the first call restricts the query to it).
    pub fn status(mut self, status: Status) -> Self {
        self.statuses.push(status);
        self
    }

    /// Only records claimed at least `attempts` times.
    pub fn min_attempts(mut self, attempts: u32) -> Self {
        self.min_attempts = Some(attempts);
        self
    }

    /// Only records that met at least `conflicts` conflicting duplicates (1: every record
    /// marked by [`Store::mark_conflict`](idempotency_core::Store::mark_conflict)).
    pub fn min_conflicts(mut self, conflicts: u32) -> Self {
        self.min_conflicts = Some(conflicts);
        self
    }

    /// Whether `record` is one of these at `now`.
    pub fn matches(&self, record: &Record, now: SystemTime) -> bool {
        let status = Status::of(record, now);
        let by_status = self.statuses.is_empty()
            || self.statuses.contains(&status)
            || (record.state == RecordState::InProgress
                && self
                    .in_progress_before
                    .is_some_and(|before| record.updated_at < before));
        by_status
            && self
                .namespace
                .as_deref()
                .is_none_or(|namespace| record.namespace == namespace)
            && self
                .updated_from
                .is_none_or(|from| record.updated_at >= from)
            && self
                .updated_before
                .is_none_or(|before| record.updated_at < before)
            && self
                .min_attempts
                .is_none_or(|attempts| record.attempts >= attempts)
            && self
                .min_conflicts
                .is_none_or(|conflicts| record.conflicts >= conflicts)
    }

    /// The one stored state every matching record is in, if there is one: what a store can
    /// filter on before decoding records.
    pub fn stored_state(&self) -> Option<RecordState> {
        let mut states = self.statuses.iter().map(|status| status.stored_state());
        let first = states.next()?;
        let one = states.all(|state| state == first)
            && (self.in_progress_before.is_none() || first == RecordState::InProgress);
        one.then_some(first)
    }
}
