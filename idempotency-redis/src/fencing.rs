//! Fencing tokens issued by the client, strictly increasing within the process.
//!
//! A fresh key is claimed by one native `SET ... NX GET`, so its token must be known before the
//! command is sent: it is the client's clock in microseconds, made strictly monotonic for the
//! whole process (`max(last + 1, now)`), and pushed past every token the process sees (its own,
//! a takeover token the claim script chose, a token read from a stored record). Within a process
//! tokens therefore never go backwards, whatever the clock does; across processes they are
//! ordered by their clocks, within the clocks' skew (a hybrid logical clock).

use std::sync::atomic::{AtomicU64, Ordering};

/// The largest token the store issues or follows: the scripts do token arithmetic in Lua
/// numbers (doubles), exact up to 2^53 (microseconds reach it in the year 2255).
pub(super) const MAX_TOKEN: u64 = (1 << 53) - 1;

/// The last token issued or seen by this process.
static LAST: AtomicU64 = AtomicU64::new(0);

/// A new token, `now_us` being the clock read by the caller (Unix microseconds): greater than
/// every token this process issued or saw before.
pub(super) fn next_at(now_us: u64) -> u64 {
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let token = now_us.max(last + 1);
        match LAST.compare_exchange_weak(last, token, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return token,
            Err(current) => last = current,
        }
    }
}

/// Records a token seen in a reply or given back, so later tokens of this process exceed it.
/// Tokens beyond [`MAX_TOKEN`] were not issued by a store of this kind and are ignored.
pub(super) fn observe(token: u64) {
    if token <= MAX_TOKEN && token > LAST.load(Ordering::Relaxed) {
        LAST.fetch_max(token, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::unix_micros_now;

    fn next() -> u64 {
        next_at(unix_micros_now())
    }

    #[test]
    fn tokens_grow_strictly_even_when_the_clock_goes_back() {
        let first = next();
        let same_instant = next_at(first);
        assert!(same_instant > first);
        let clock_set_back = next_at(first - 5_000_000);
        assert!(clock_set_back > same_instant);
    }

    #[test]
    fn a_seen_token_ahead_of_the_clock_orders_later_tokens() {
        let ahead = unix_micros_now() + 3_600_000_000;
        observe(ahead);
        assert!(next() > ahead);
        observe(u64::MAX); // not a token of ours: ignored
        assert!(next() < MAX_TOKEN);
    }
}
