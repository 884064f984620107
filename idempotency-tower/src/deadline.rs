//! The caller's deadline: waiting for a duplicate in flight never outlives it.

use std::time::{Duration, Instant};

use http::request::Parts;

/// The latest moment a caller waits for its answer, as a request extension.
///
/// A timeout middleware of the service's own may insert it; in gRPC mode the layer reads the
/// call's `grpc-timeout` too. A duplicate that waits for the first request with its key
/// ([`InFlightPolicy::Wait`](idempotency_core::InFlightPolicy::Wait)) stops waiting at the
/// earlier of its bound and this deadline.
///
/// ```
/// use idempotency_tower::Deadline;
/// use std::time::{Duration, Instant};
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Deadline(Instant::now() + Duration::from_secs(2)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(pub Instant);

/// The request's deadline: its [`Deadline`] extension, or (in gRPC mode) its `grpc-timeout`,
/// whichever comes first.
pub(crate) fn of(parts: &Parts, grpc: bool) -> Option<Instant> {
    let extension = parts
        .extensions
        .get::<Deadline>()
        .map(|deadline| deadline.0);
    let timeout = grpc
        .then(|| parts.headers.get("grpc-timeout"))
        .flatten()
        .and_then(|value| grpc_timeout(value.as_bytes()))
        .map(|timeout| Instant::now() + timeout);
    match (extension, timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(grpc_timeout(b"500m"), Some(Duration::from_millis(500)));
        assert_eq!(grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(grpc_timeout(b"30u"), Some(Duration::from_micros(30)));
        for bad in [&b""[..], b"m", b"123456789m", b"5x", b"-5S", b"5 S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_earlier_deadline_wins() {
        let later = Instant::now() + Duration::from_secs(60);
        let mut request = http::Request::builder()
            .header("grpc-timeout", "100m")
            .body(())
            .unwrap_or_default();
        request.extensions_mut().insert(Deadline(later));
        let (parts, ()) = request.into_parts();
        let deadline = of(&parts, true).unwrap_or(later);
        assert!(deadline < Instant::now() + Duration::from_millis(150));
        assert_eq!(of(&parts, false), Some(later));
    }
}
