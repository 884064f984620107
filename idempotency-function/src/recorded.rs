//! A function result that tells a first run from a replay.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value returned by an `#[idempotent]` function (any mode) that tells its caller whether the
/// body ran now or the value is the replay of an earlier run.
///
/// Return `Ok(Recorded::new(value))` from the body; the caller reads
/// [`is_replay`](Self::is_replay) and [`into_inner`](Self::into_inner). It is stored as the bare
/// value (the same JSON as `value`), so switching a function to it keeps its records readable.
///
/// ```
/// use idempotency_function::{self as function, Call, Recorded};
/// use idempotency_core::{Error, Idempotency, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let engine = Idempotency::new(MemoryStore::new());
/// let grant = || {
///     function::run::<Result<Recorded<u32>, Error>, _, _, _>(
///         engine.clone(),
///         Call::new("coupons", "T1"),
///         From::from,
///         async { Ok(Recorded::new(7)) },
///     )
/// };
/// let first = grant().await.unwrap();
/// assert!(!first.is_replay());
/// let again = grant().await.unwrap();
/// assert!(again.is_replay());
/// assert_eq!(again.into_inner(), 7);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Recorded<T> {
    value: T,
    replayed: bool,
}

impl<T> Recorded<T> {
    /// A value the body produced now.
    pub fn new(value: T) -> Self {
        Self {
            value,
            replayed: false,
        }
    }

    /// Whether the value is the replay of an earlier run (the body did not run).
    pub fn is_replay(&self) -> bool {
        self.replayed
    }

    /// The value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value, unwrapped.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T: Serialize> Serialize for Recorded<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

/// Only a replay is ever decoded: a decoded value is one.
impl<'de, T: Deserialize<'de>> Deserialize<'de> for Recorded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self {
            value: T::deserialize(deserializer)?,
            replayed: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_as_the_bare_value_and_decoded_as_a_replay() {
        let json = serde_json::to_string(&Recorded::new(42)).unwrap_or_default();
        assert_eq!(json, "42");
        let back: Recorded<u32> = serde_json::from_str(&json).unwrap_or(Recorded::new(0));
        assert!(back.is_replay());
        assert_eq!(*back.value(), 42);
    }
}
