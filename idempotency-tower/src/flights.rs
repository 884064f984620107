//! Duplicates of one key in one process wait in memory for each other, not on database
//! connections or the store: one request per key at a time goes to the store (transactional
//! and steps modes); and the bounds of those modes' waits.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idempotency_core::{Error, InFlightPolicy, StorageKey};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The keys this process is claiming or running, each with a one-permit semaphore that its
/// duplicates queue on.
#[derive(Clone, Default)]
pub(crate) struct Flights {
    keys: Arc<Mutex<HashMap<StorageKey, Arc<Semaphore>>>>,
}

/// One key's turn: held from the claim to the commit. Dropping it lets the next duplicate in.
pub(crate) struct Flight {
    /// Released before the entry is looked at (fields drop in order).
    _permit: OwnedSemaphorePermit,
    _entry: Entry,
}

/// A reference to a key's semaphore that removes it from the map when it is the last one.
struct Entry {
    flights: Flights,
    key: StorageKey,
    semaphore: Arc<Semaphore>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut keys = self.flights.lock();
        // The map's reference and this one: nobody else holds or waits for the key.
        if Arc::strong_count(&self.semaphore) == 2 {
            keys.remove(&self.key);
        }
    }
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, HashMap<StorageKey, Arc<Semaphore>>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `key`'s turn, as `in_flight` allows: at once or not at all for
    /// [`InFlightPolicy::Reject`], up to its bound for [`InFlightPolicy::Wait`]. `None`: another
    /// request of this process still holds the key.
    pub(crate) async fn enter(&self, key: StorageKey, in_flight: InFlightPolicy) -> Option<Flight> {
        let semaphore = Arc::clone(
            self.lock()
                .entry(key)
                .or_insert_with(|| Arc::new(Semaphore::new(1))),
        );
        let entry = Entry {
            flights: self.clone(),
            key,
            semaphore,
        };
        let acquire = Arc::clone(&entry.semaphore);
        let permit = match in_flight {
            InFlightPolicy::Reject => acquire.try_acquire_owned().ok()?,
            InFlightPolicy::Wait { max } => tokio::time::timeout(max, acquire.acquire_owned())
                .await
                .ok()?
                .ok()?,
        };
        Some(Flight {
            _permit: permit,
            _entry: entry,
        })
    }

    /// How many keys are in flight (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Bounds the claims that may wait on another transaction's row at once, so waiting duplicates
/// never hold more than a share of the pool's connections: a claim without a permit asks the
/// database without waiting, and polls from memory, holding no connection meanwhile.
#[cfg(feature = "sql")]
pub(crate) struct Claims {
    permits: Arc<Semaphore>,
}

#[cfg(feature = "sql")]
impl Claims {
    /// `permits` claims at a time.
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(permits.max(1))),
        }
    }

    /// The right to wait on the database, if a permit is free now.
    pub(crate) fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }
}

/// `policy` with `elapsed` of its wait spent.
pub(crate) fn after(policy: InFlightPolicy, elapsed: Duration) -> InFlightPolicy {
    match policy {
        InFlightPolicy::Wait { max } if max > elapsed => InFlightPolicy::wait(max - elapsed),
        _ => InFlightPolicy::Reject,
    }
}

/// `call`, failed with [`Error::Timeout`] once it has taken `bound`.
pub(crate) async fn within<T>(
    bound: Duration,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(bound, call)
        .await
        .unwrap_or(Err(Error::Timeout(bound)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_permits_run_out() {
        let claims = Claims::new(1);
        let first = claims.try_enter();
        assert!(first.is_some());
        assert!(claims.try_enter().is_none());
        drop(first);
        assert!(claims.try_enter().is_some());
    }

    #[tokio::test]
    async fn one_turn_per_key_and_the_map_empties() {
        use std::time::Duration;
        let flights = Flights::default();
        let (a, b) = (StorageKey([1; 32]), StorageKey([2; 32]));
        let first = flights.enter(a, InFlightPolicy::Reject).await;
        assert!(first.is_some());
        assert!(flights.enter(a, InFlightPolicy::Reject).await.is_none());
        assert!(flights.enter(b, InFlightPolicy::Reject).await.is_some());
        // A waiter gets the turn once the first lets go.
        let waiter = {
            let flights = flights.clone();
            tokio::spawn(async move {
                flights
                    .enter(a, InFlightPolicy::wait(Duration::from_secs(5)))
                    .await
                    .is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert!(waiter.await.unwrap_or(false));
        // A wait that runs out gives up.
        let held = flights.enter(a, InFlightPolicy::Reject).await;
        let late = flights
            .enter(a, InFlightPolicy::wait(Duration::from_millis(20)))
            .await;
        assert!(held.is_some() && late.is_none());
        drop(held);
        assert_eq!(flights.len(), 0, "no key stays in the map");
    }
}
