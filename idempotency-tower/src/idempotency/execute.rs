//! Running the handler for a claimed key, to its end, then storing or releasing its response.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderName, Request, Response, header};
use http_body::Body;
use idempotency_core::{Execution, Outcome, Store};
use tower_service::Service;
use tracing::Instrument;

use super::layer::IdempotencyLayer;
use super::settings::Settings;
use crate::body::{RequestBody, ResponseBody};
use crate::codec::{StoredResponse, encode_parts};
use crate::collect::{Collected, collect_response};
use crate::headers::{Storable, Survey};
use crate::policy::grpc_code;
use crate::refusal::{Refusal, RefusalKind};

/// Runs the handler for a claimed key to its end (handler, lease renewal, complete or release).
///
/// The work runs inline, in the request's own future: no task is spawned per request. It is
/// boxed so that it can be moved while running: if the request's future is dropped before the
/// work finished (the client went away), [`Detachable`] moves the still-running work into a task
/// on the runtime it was polled in, where it goes on to its end, lease renewal included.
pub(crate) fn run<T, S, B, ResB>(
    layer: &IdempotencyLayer<S>,
    execution: Execution<S>,
    inner: T,
    request: Request<RequestBody<B>>,
) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, T::Error>> + Send + 'static
where
    S: Store,
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>> + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    ResB: Body<Data = Bytes> + Send + Unpin + 'static,
    ResB::Error: Send + 'static,
{
    let mut inner = inner;
    // The handler's future, boxed apart: moved into the work's future (by value, as futures
    // are passed) it would take its room there twice. Each box stays small enough for the
    // allocator's per-thread cache (about 1 KiB with glibc): larger blocks take the shared
    // arena's lock, which the two sides of a loopback benchmark then contend for.
    let handler = Box::pin(inner.call(request));
    let work = Box::pin(run_to_end(layer.clone(), execution, handler));
    Detachable {
        work: Some(work),
        home: None,
    }
}

/// Where unfinished work goes on: the runtime and span it was polled in.
struct Home {
    runtime: Option<tokio::runtime::Handle>,
    span: tracing::Span,
}

impl Home {
    fn current() -> Self {
        Self {
            runtime: tokio::runtime::Handle::try_current().ok(),
            span: tracing::Span::current(),
        }
    }
}

/// Work that finishes in the background if its awaiting future is dropped unfinished.
pub(crate) struct Detachable<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    /// `None` once finished, and while being polled (a panicking poll drops it, never detaches
    /// it).
    work: Option<Pin<Box<F>>>,
    /// Captured when the work first waits: work done at its first poll (a handler that answers
    /// at once, a store that answers at once) is never detached, and pays for neither.
    home: Option<Home>,
}

impl<F: Future + Send + 'static> Future for Detachable<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(mut work) = self.work.take() else {
            panic!("Detachable polled after completion");
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(output),
            Poll::Pending => {
                self.work = Some(work);
                if self.home.is_none() {
                    self.home = Some(Home::current());
                }
                Poll::Pending
            }
        }
    }
}

impl<F: Future + Send + 'static> Drop for Detachable<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        let Home { runtime, span } = self.home.take().unwrap_or_else(Home::current);
        match runtime {
            Some(runtime) => {
                tracing::debug!(
                    parent: &span,
                    "request dropped while its handler runs; finishing it in the background"
                );
                drop(runtime.spawn(work.instrument(span)));
            }
            None => {
                tracing::warn!(
                    parent: &span,
                    "request dropped while its handler runs, outside a tokio runtime: the handler is abandoned"
                );
            }
        }
    }
}

/// What the handler answered, as settling the record needs it (borrowed, and shareable across
/// threads, unlike the response body and the errors).
enum Answer<'a> {
    /// The service returned an error.
    ServiceError,
    /// A response collected whole.
    Complete {
        parts: &'a http::response::Parts,
        data: &'a Bytes,
        trailers: &'a Option<http::HeaderMap>,
    },
    /// A response whose body exceeds the stored-response limit.
    Oversized { parts: &'a http::response::Parts },
    /// A response whose body failed.
    BodyFailed,
}

/// Runs the handler for a claimed key, collects its response, then stores or releases it.
///
/// Written for a small future (it is boxed per new key): the handler's own future is boxed
/// apart, the handler's work is pinned in a scope of its own, and settling the record only
/// borrows the handler's answer, which is moved into the response once every store call is done.
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
            // Pinned here and renewed through a pinned reference (a future passed by value
            // would take its room twice).
            // One await point: a local awaited at two would be kept apart from every other.
            let work = std::pin::pin!(handle(handler, settings.max_stored_bytes));
            renewing(&execution, settings.keep_alive, work).await
        };
        let answer = match &handled {
            Err(_) => Answer::ServiceError,
            Ok((parts, Collected::Complete(data, trailers))) => Answer::Complete {
                parts,
                data,
                trailers,
            },
            Ok((parts, Collected::Overflow(..))) => Answer::Oversized { parts },
            Ok((_, Collected::Failed(..))) => Answer::BodyFailed,
        };
        let content_length = settle(settings, execution, answer).await;
        let (mut parts, collected) = handled?;
        Ok(match collected {
            Collected::Complete(data, trailers) => {
                if let Some(length) = content_length {
                    // The stored field, shared: the server then adds none of its own.
                    parts.headers.insert(header::CONTENT_LENGTH, length);
                }
                Response::from_parts(parts, ResponseBody::buffered(data, trailers))
            }
            Collected::Overflow(prefix, rest) => {
                Response::from_parts(parts, ResponseBody::partial(prefix, rest))
            }
            Collected::Failed(data, error) => {
                Response::from_parts(parts, ResponseBody::failed(data, error))
            }
        })
    }
}

/// Stores the handler's answer for replay, or releases the key, as the settings say. Returns
/// the `Content-Length` stored with the answer, if one was added (see [`encode_storable`]).
#[allow(clippy::manual_async_fn)] // an `async fn` would keep its arguments twice
fn settle<'a, S: Store + 'a>(
    settings: &'a Settings,
    execution: Execution<S>,
    answer: Answer<'a>,
) -> impl Future<Output = Option<http::HeaderValue>> + 'a {
    async move {
        let mut content_length = None;
        match answer {
            Answer::ServiceError => {
                tracing::debug!("the service failed; releasing the key");
                let _ = execution.release().await;
            }
            Answer::Complete {
                parts,
                data,
                trailers,
            } => {
                let status = parts.status;
                if !settings
                    .storage
                    .should_store(status, &parts.headers, trailers.as_ref())
                {
                    tracing::debug!(
                        status = status.as_u16(),
                        "response not stored; releasing the key"
                    );
                    let _ = execution.release().await;
                    return content_length;
                }
                let Some((record_status, encoded, length)) =
                    encode_storable(settings, parts, data, trailers)
                else {
                    let detail = format!(
                        "its response headers exceed the stored-response bounds ({} fields, {} bytes)",
                        settings.max_stored_headers, settings.max_stored_header_bytes
                    );
                    // Boxed: a rare path, whose future would enlarge every new key's.
                    Box::pin(settle_unstorable(
                        settings,
                        execution,
                        parts,
                        trailers.as_ref(),
                        detail,
                    ))
                    .await;
                    return content_length;
                };
                // A slice of the stored bytes (shared, not copied).
                content_length = length.and_then(|range| {
                    http::HeaderValue::from_maybe_shared(encoded.slice(range)).ok()
                });
                match execution
                    .complete(Outcome::new(record_status, encoded))
                    .await
                {
                    Ok(()) => tracing::debug!(status = status.as_u16(), "response stored"),
                    Err(error) => tracing::warn!(
                        %error,
                        "the response could not be stored; a retry may run the handler again"
                    ),
                }
            }
            Answer::Oversized { parts } => {
                let detail = format!(
                    "its response body exceeds the stored-response limit of {} bytes",
                    settings.max_stored_bytes
                );
                Box::pin(settle_unstorable(settings, execution, parts, None, detail)).await;
            }
            Answer::BodyFailed => {
                tracing::warn!("the response body failed; key released");
                let _ = execution.release().await;
            }
        }
        content_length
    }
}

/// The record's status and the stored encoding of a response, without the fields that are not
/// stored (encoded straight from the response's own maps: nothing is copied first), and where
/// in it the `Content-Length` value is, if one was added; `None` if its fields exceed the
/// stored-response bounds. Each map is read once for all the rules ([`Survey`]).
///
/// A plain HTTP answer with a body and no `Content-Length` of its own is stored with the one
/// the server would add (the body's length): a replay then carries it, as the first answer
/// does, without building it again.
fn encode_storable(
    settings: &Settings,
    parts: &http::response::Parts,
    data: &Bytes,
    trailers: &Option<http::HeaderMap>,
) -> Option<(u16, Bytes, Option<std::ops::Range<usize>>)> {
    let headers = Survey::of(&parts.headers);
    let trailers_surveyed = trailers.as_ref().map(|map| (map, Survey::of(map)));
    let trailer_survey = trailers_surveyed.as_ref().map(|(_, survey)| survey);
    if !within_bounds(settings, &headers, trailer_survey) {
        return None;
    }
    let keep = settings.store_sensitive_headers;
    let header_rule = Storable::new(&parts.headers, &headers, keep);
    let trailer_rule = trailers_surveyed
        .as_ref()
        .map(|(map, survey)| (*map, Storable::new(map, survey, keep)));
    let record_status = if settings.grpc {
        grpc_code(&parts.headers, trailers.as_ref()).unwrap_or(parts.status.as_u16())
    } else {
        parts.status.as_u16()
    };
    let mut digits = [0u8; 20];
    let length = format_len(&mut digits, data.len());
    let content_length = (!settings.grpc
        && trailers.is_none()
        && !data.is_empty()
        && !parts.status.is_informational()
        && parts.status != http::StatusCode::NO_CONTENT
        && parts.status != http::StatusCode::NOT_MODIFIED
        && !headers.content_length
        && !headers.transfer_encoding
        // Within the stored-response bounds with the field added.
        && headers.fields < settings.max_stored_headers
        && headers.bytes + header::CONTENT_LENGTH.as_str().len() + length.len()
            <= settings.max_stored_header_bytes)
        .then_some((&header::CONTENT_LENGTH, length));
    let (encoded, length) = encode_parts(
        parts.status,
        (&parts.headers, |name: &HeaderName| header_rule.keeps(name)),
        content_length,
        data,
        trailer_rule
            .as_ref()
            .map(|(map, rule)| (*map, |name: &HeaderName| rule.keeps(name))),
    );
    Some((record_status, encoded, length))
}

/// `len` in decimal, written into `buffer`.
fn format_len(buffer: &mut [u8; 20], mut len: usize) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (len % 10) as u8;
        len /= 10;
        if len == 0 {
            return &buffer[at..];
        }
    }
}

/// Awaits `work`, renewing the execution's lease meanwhile if `renew`.
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

/// The handler's response, its body collected for storage.
async fn handle<F, ResB, E>(
    handler: Pin<Box<F>>,
    limit: usize,
) -> Result<(http::response::Parts, Collected<ResB>), E>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    let (parts, body) = handler.await?.into_parts();
    Ok((parts, collect_response(body, limit).await))
}

/// Settles a response the store cannot hold. One the storage policy would not store anyway
/// (5xx, 429, …) releases the key as usual. Otherwise the handler's work is done and must not
/// run again: the key is completed with a [`RefusalKind::NotReplayable`] answer, which retries
/// get (with `Idempotent-Replayed`), while the first client still receives the whole response.
async fn settle_unstorable<S: Store>(
    settings: &Settings,
    execution: Execution<S>,
    parts: &http::response::Parts,
    trailers: Option<&http::HeaderMap>,
    why: String,
) {
    if !settings
        .storage
        .should_store(parts.status, &parts.headers, trailers)
    {
        let _ = execution.release().await;
        return;
    }
    tracing::warn!(status = parts.status.as_u16(), %why, "response not storable; retries will be told it was processed");
    let refusal = Refusal::new(
        RefusalKind::NotReplayable,
        format!(
            "the request with this key was processed (status {}), but {why}, so it cannot be replayed",
            parts.status.as_u16()
        ),
    );
    let (answer, body) = settings.renderer.render(&refusal).into_parts();
    let stored = StoredResponse {
        status: answer.status,
        headers: answer.headers,
        body,
        trailers: None,
    };
    if let Err(error) = execution
        .complete(Outcome::new(parts.status.as_u16(), stored.encode()))
        .await
    {
        tracing::warn!(%error, "the not-replayable marker could not be stored; a retry may run the handler again");
    }
}

/// Whether a response's header and trailer fields fit the stored-response bounds.
fn within_bounds(settings: &Settings, headers: &Survey, trailers: Option<&Survey>) -> bool {
    let trailers = trailers.copied().unwrap_or_default();
    headers.fields + trailers.fields <= settings.max_stored_headers
        && headers.bytes + trailers.bytes <= settings.max_stored_header_bytes
}
