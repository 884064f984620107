//! The completer of a steps layer: runs nobody retries, resumed through the service itself.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use idempotency_core::Record;
use idempotency_steps::{Completer, RunStore};
use tower_service::Service;
use tracing::Instrument;

use super::input::{Input, Resume};
use super::layer::StepsLayer;

impl<S: RunStore> StepsLayer<S> {
    /// Spawns the completer of this layer's runs ([`idempotency_steps::Completer`]): every
    /// `interval` it finds the runs that stopped part-way (their owner died, or paused on a step
    /// that may succeed later) and sends each one's kept request through `service` (the app
    /// with this layer in it) marked with [`Resume`], one at a time; a run whose owner lives is
    /// left to it. A run stops being resumed after its tenth owner (it is stuck: operators see
    /// it). Abort the task to stop it.
    ///
    /// A run is found within `interval` (plus its resume) of its owner's death; a run paused on
    /// a step that may succeed later is tried again every `interval`.
    pub fn spawn_completer<T, B>(
        &self,
        service: T,
        interval: Duration,
    ) -> tokio::task::JoinHandle<()>
    where
        T: Service<Request<B>> + Clone + Send + 'static,
        T::Future: Send,
        B: From<Bytes> + Send + 'static,
    {
        let source = S::source(&self.shared.runner);
        Completer::new(source, self.namespace()).spawn(interval, move |record: Record| {
            let service = service.clone();
            async move { resume(service, record).await }
        })
    }
}

/// Sends the kept request of `record`'s run through `service`, marked with [`Resume`].
async fn resume<T, B>(mut service: T, record: Record)
where
    T: Service<Request<B>>,
    B: From<Bytes>,
{
    let Some(progress) = record.progress else {
        return;
    };
    let resume = Resume {
        key: record.key,
        fingerprint: record.fingerprint,
        principal: None,
    };
    let Some(request) = Input::request::<B>(&progress.input, resume) else {
        tracing::warn!(key = %record.key, "a run's kept request does not decode; left to its client and operators");
        return;
    };
    let span = tracing::info_span!(
        "completer.resume",
        key = %record.key,
        stopped_at = progress.stopped_at().unwrap_or("")
    );
    let key = record.key;
    async move {
        if std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .is_err()
        {
            tracing::warn!("the service refused the completer's resume");
            return;
        }
        if service.call(request).await.is_err() {
            tracing::warn!(%key, "the completer's resume failed; it is tried again");
        }
    }
    .instrument(span)
    .await;
}
