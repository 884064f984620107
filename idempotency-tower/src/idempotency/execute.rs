//! Running the handler for a claimed key, to its end, then storing or releasing its response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::{Execution, Store};
use tower_service::Service;

use super::layer::IdempotencyLayer;
use crate::body::{RequestBody, ResponseBody};
use crate::detach::Detachable;
use crate::guarded::{Answered, Exchange};
use crate::stored::{Ending, ending_of, handle, respond};

/// Runs the handler for a claimed key to its end (handler, lease renewal, complete or release).
///
/// The work runs inline, in the request's own future: no task is spawned per request. If the
/// request's future is dropped before the work finished (the client went away),
/// [`Detachable`] moves the still-running work into a task on the runtime it was polled in,
/// where it goes on to its end, lease renewal included.
pub(crate) fn run<X, S>(
    layer: &IdempotencyLayer<S>,
    execution: Execution<S>,
    inner: X::Inner,
    request: Request<RequestBody<X::Body>>,
) -> impl Future<Output = Answered<X>> + Send + 'static
where
    X: Exchange,
    S: Store,
{
    let mut inner = inner;
    // The handler's future, boxed apart: moved into the work's future (by value, as futures
    // are passed) it would take its room there twice.
    let handler = Box::pin(inner.call(request));
    let detached = Arc::clone(&layer.settings().detached);
    Detachable::new(run_to_end(layer.clone(), execution, handler), detached)
}

/// Runs the handler for a claimed key, collects its response, then stores or releases it.
///
/// Written for a small future (it is boxed per new key, and a box over 1 KiB leaves glibc's
/// per-thread cache): its arguments are kept once (an `async fn` would keep them twice), and
/// the handler's work is awaited at one point only.
#[allow(clippy::manual_async_fn)] // an `async fn` would keep its arguments twice
pub(super) fn run_to_end<F, S, ResB, E>(
    layer: IdempotencyLayer<S>,
    execution: Execution<S>,
    handler: Pin<Box<F>>,
) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, E>>
where
    S: Store,
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    async move {
        let settings = layer.settings();
        let handled = {
            // The handler and its body, with the lease renewed meanwhile (no second task).
            let work = std::pin::pin!(handle(handler, settings.max_stored_bytes));
            renewing(&execution, settings.keep_alive, work).await
        };
        let content_length = match ending_of(settings, &handled) {
            Ending::Complete {
                outcome,
                content_length,
            } => {
                let status = outcome.status;
                match execution.complete(outcome).await {
                    Ok(()) => tracing::debug!(status, "response stored"),
                    // Retried by the engine in the background until it lands or the lease ends.
                    Err(error) => tracing::warn!(%error, "the response is not stored yet"),
                }
                content_length
            }
            Ending::Release => {
                // The engine logs and counts a failed release; the lease then ends on its own.
                let _ = execution.release().await;
                None
            }
        };
        respond(handled, content_length)
    }
}

/// Awaits `work`, renewing the execution's lease meanwhile if `renew` (one await point for
/// both cases, so that the caller's future keeps one of them).
async fn renewing<S: Store, W: Future>(
    execution: &Execution<S>,
    renew: bool,
    work: Pin<&mut W>,
) -> W::Output {
    if renew {
        execution.keep_alive_while(work).await
    } else {
        work.await
    }
}
