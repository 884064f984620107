//! Running the handler for a claimed key, to its end, then storing or releasing its response.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use idempotency_core::{Execution, Outcome, Store};
use tower_service::Service;
use tracing::Instrument;

use super::gate::refuse;
use super::settings::Settings;
use crate::body::{RequestBody, ResponseBody};
use crate::codec::StoredResponse;
use crate::collect::{Collected, collect_response};
use crate::headers::strip_unstorable;
use crate::policy::grpc_code;
use crate::refusal::{Refusal, RefusalKind};

/// Runs the handler for a claimed key in its own task, so that it goes on to its end (handler,
/// complete or release) even if the client goes away; the caller only awaits the task's result.
pub(crate) async fn spawn<T, S, B, ResB>(
    settings: &Arc<Settings>,
    execution: Execution<S>,
    inner: T,
    request: Request<RequestBody<B>>,
) -> Result<Response<ResponseBody<ResB>>, T::Error>
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
    // Boxed: the task cell then holds a pointer, not the whole future moved in and out.
    let work = Box::pin(run_to_end(Arc::clone(settings), execution, inner, request));
    let task = tokio::spawn(work.instrument(tracing::Span::current()));
    match task.await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => {
            let refusal = Refusal::new(
                RefusalKind::StoreUnavailable,
                "the request was cancelled while being processed; retry later",
            )
            .with_retry_after(settings.unavailable_retry_after);
            Ok(refuse(settings, refusal))
        }
    }
}

/// Runs the handler for a claimed key, collects its response, then stores or releases it.
async fn run_to_end<T, S, B, ResB>(
    settings: Arc<Settings>,
    execution: Execution<S>,
    mut inner: T,
    request: Request<RequestBody<B>>,
) -> Result<Response<ResponseBody<ResB>>, T::Error>
where
    S: Store,
    T: Service<Request<RequestBody<B>>, Response = Response<ResB>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    // The handler and its body, with the lease renewed meanwhile (no second task).
    let work = async {
        let response = inner.call(request).await?;
        let (parts, body) = response.into_parts();
        Ok((
            parts,
            collect_response(body, settings.max_stored_bytes).await,
        ))
    };
    let finished = if settings.keep_alive {
        execution.keep_alive_while(work).await
    } else {
        work.await
    };
    let (parts, collected) = match finished {
        Ok(finished) => finished,
        Err(error) => {
            tracing::debug!("the service failed; releasing the key");
            let _ = execution.release().await;
            return Err(error);
        }
    };
    match collected {
        Collected::Complete(data, trailers) => {
            let status = parts.status;
            if !headers_within_bounds(&settings, &parts.headers, trailers.as_ref()) {
                let detail = format!(
                    "its response headers exceed the stored-response bounds ({} fields, {} bytes)",
                    settings.max_stored_headers, settings.max_stored_header_bytes
                );
                settle_unstorable(&settings, execution, &parts, trailers.as_ref(), detail).await;
            } else if settings
                .storage
                .should_store(status, &parts.headers, trailers.as_ref())
            {
                let keep = settings.store_sensitive_headers;
                let mut headers = parts.headers.clone();
                strip_unstorable(&mut headers, keep);
                let stored_trailers = trailers.clone().map(|mut t| {
                    strip_unstorable(&mut t, keep);
                    t
                });
                let record_status = if settings.grpc {
                    grpc_code(&parts.headers, trailers.as_ref()).unwrap_or(status.as_u16())
                } else {
                    status.as_u16()
                };
                let stored = StoredResponse {
                    status,
                    headers,
                    body: data.clone(),
                    trailers: stored_trailers,
                };
                match execution
                    .complete(Outcome::new(record_status, stored.encode()))
                    .await
                {
                    Ok(()) => tracing::debug!(status = status.as_u16(), "response stored"),
                    Err(error) => tracing::warn!(
                        %error,
                        "the response could not be stored; a retry may run the handler again"
                    ),
                }
            } else {
                tracing::debug!(
                    status = status.as_u16(),
                    "response not stored; releasing the key"
                );
                let _ = execution.release().await;
            }
            Ok(Response::from_parts(
                parts,
                ResponseBody::buffered(data, trailers),
            ))
        }
        Collected::Overflow(prefix, rest) => {
            let detail = format!(
                "its response body exceeds the stored-response limit of {} bytes",
                settings.max_stored_bytes
            );
            settle_unstorable(&settings, execution, &parts, None, detail).await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::partial(prefix, rest),
            ))
        }
        Collected::Failed(data, error) => {
            tracing::warn!("the response body failed; key released");
            let _ = execution.release().await;
            Ok(Response::from_parts(
                parts,
                ResponseBody::failed(data, error),
            ))
        }
    }
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
fn headers_within_bounds(
    settings: &Settings,
    headers: &http::HeaderMap,
    trailers: Option<&http::HeaderMap>,
) -> bool {
    let maps = std::iter::once(headers).chain(trailers);
    let (mut count, mut bytes) = (0usize, 0usize);
    for (name, value) in maps.flat_map(|map| map.iter()) {
        count += 1;
        bytes += name.as_str().len() + value.len();
    }
    count <= settings.max_stored_headers && bytes <= settings.max_stored_header_bytes
}
