//! Consuming across broker outages: a consume loop that ends with its connection is started
//! again, after a pause that grows while the broker stays away, until the application stops it.

use std::future::Future;
use std::time::Duration;

use crate::stop::Stop;

/// The first pause after a failure; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two attempts.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);
/// A session that lasted this long was healthy: the next failure pauses from the start again.
const HEALTHY: Duration = Duration::from_secs(30);

/// Runs `session` again and again: each call connects and consumes until its connection fails
/// (or ends). Returns once `stop` was asked for and the running session ended.
pub(crate) async fn until<F, Fut, E>(what: &'static str, stop: &Stop, mut session: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut pause = FIRST_PAUSE;
    while !stop.requested() {
        let started = tokio::time::Instant::now();
        let ended = session().await;
        if stop.requested() {
            tracing::info!(broker = what, "stopped consuming");
            return;
        }
        match ended {
            // A cancelled consumer (by the application, or by the broker when its queue was
            // deleted) ends its deliveries: not a failure.
            Ok(()) => tracing::info!(broker = what, "the deliveries ended; consuming again"),
            Err(error) => {
                tracing::warn!(broker = what, %error, ?pause, "consuming failed; reconnecting");
            }
        }
        if started.elapsed() >= HEALTHY {
            pause = FIRST_PAUSE;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.asked() => return,
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
