//! The graceful stop: a flag the shutdown signal raises and every consume loop watches.

use std::convert::Infallible;
use std::future::Future;

use tokio::sync::watch;

/// Whether the application asked the consumers to stop: a session stops taking deliveries,
/// finishes the ones in hand, and no new session starts.
#[derive(Clone, Debug)]
pub(crate) struct Stop(Option<watch::Receiver<bool>>);

impl Stop {
    /// A stop that never comes.
    pub(crate) fn never() -> Self {
        Self(None)
    }

    /// Whether the stop was asked for.
    pub(crate) fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|stop| *stop.borrow())
    }

    /// Completes when the stop is asked for (never for [`Stop::never`]).
    pub(crate) fn asked(&self) -> impl Future<Output = ()> + Send + 'static {
        let stop = self.0.clone();
        async move {
            match stop {
                // An error means the sender is gone, which only happens once the work ended.
                Some(mut stop) => drop(stop.wait_for(|stopped| *stopped).await),
                None => std::future::pending().await,
            }
        }
    }
}

/// Runs `work` with a [`Stop`] that `shutdown` turns on (none without a signal), until `work`
/// returns (it is expected to return soon after the stop), and returns what it returned.
pub(crate) async fn with_shutdown<W, Fut, T>(
    shutdown: Option<impl Future<Output = ()>>,
    work: W,
) -> T
where
    W: FnOnce(Stop) -> Fut,
    Fut: Future<Output = T>,
{
    let Some(shutdown) = shutdown else {
        return work(Stop::never()).await;
    };
    let (ask, stop) = watch::channel(false);
    let work = work(Stop(Some(stop)));
    let signal = async move {
        shutdown.await;
        ask.send_replace(true);
        // Keeps the sender alive while the work finishes.
        std::future::pending::<Infallible>().await
    };
    tokio::select! {
        output = work => output,
        never = signal => match never {},
    }
}
