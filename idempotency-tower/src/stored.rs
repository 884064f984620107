//! What is kept of a handler's answer: its response encoded for replay, a "not replayable"
//! marker, or nothing (the key is released, or the transaction rolled back).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, header};
use http_body::Body;
use idempotency_core::Outcome;

use crate::body::ResponseBody;
use crate::codec::{StoredResponse, encode_parts};
use crate::collect::{Collected, collect_response};
use crate::headers::{Storable, Survey};
use crate::idempotency::config::Settings;
use crate::policy::grpc_code;
use crate::refusal::{Refusal, RefusalKind};

/// What the handler answered, collected for storage.
pub(crate) type Handled<ResB, E> = Result<(http::response::Parts, Collected<ResB>), E>;

/// Runs the handler and collects its response body for storage (up to `limit` bytes).
pub(crate) async fn handle<F, ResB, E>(handler: F, limit: usize) -> Handled<ResB, E>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    ResB: Body<Data = Bytes> + Unpin,
{
    let (parts, body) = handler.await?.into_parts();
    Ok((parts, collect_response(body, limit).await))
}

/// What to do with a handler's answer.
pub(crate) enum Ending {
    /// Complete the key with this outcome. The response carries `content_length` (a slice of
    /// the stored bytes) if one was added to it.
    Complete {
        outcome: Outcome,
        content_length: Option<HeaderValue>,
    },
    /// Store nothing: the key is released (or the transaction rolled back), so the client's
    /// retry runs the handler again.
    Release,
}

/// Decides what is kept of `handled`, as the settings say: a service error, a failed body and
/// a response the storage policy does not store release the key; a response the stored bounds
/// cannot hold is completed with a [`RefusalKind::NotReplayable`] marker (the work is done and
/// must not run again); the rest is stored whole.
pub(crate) fn ending_of<ResB: Body, E>(settings: &Settings, handled: &Handled<ResB, E>) -> Ending {
    let (parts, collected) = match handled {
        Err(_) => {
            tracing::debug!("the service failed; releasing the key");
            return Ending::Release;
        }
        Ok(handled) => handled,
    };
    let (data, trailers) = match collected {
        Collected::Complete(data, trailers) => (data, trailers),
        Collected::Overflow(..) => {
            let why = format!(
                "its response body exceeds the stored-response limit of {} bytes",
                settings.max_stored_bytes
            );
            return not_replayable(settings, parts, None, why);
        }
        Collected::Failed(..) => {
            tracing::warn!("the response body failed; key released");
            return Ending::Release;
        }
    };
    let status = parts.status;
    if !settings
        .storage
        .should_store(status, &parts.headers, trailers.as_ref())
    {
        tracing::debug!(
            status = status.as_u16(),
            "response not stored; releasing the key"
        );
        return Ending::Release;
    }
    match encode_storable(settings, parts, data, trailers) {
        Some((record_status, encoded, length)) => Ending::Complete {
            // A slice of the stored bytes (shared, not copied).
            content_length: length
                .and_then(|range| HeaderValue::from_maybe_shared(encoded.slice(range)).ok()),
            outcome: Outcome::new(record_status, encoded),
        },
        None => {
            let why = format!(
                "its response headers exceed the stored-response bounds ({} fields, {} bytes)",
                settings.max_stored_headers, settings.max_stored_header_bytes
            );
            not_replayable(settings, parts, trailers.as_ref(), why)
        }
    }
}

/// The response the client gets for `handled`: the handler's, its body as collected, with the
/// stored `Content-Length` where one was added.
pub(crate) fn respond<ResB: Body, E>(
    handled: Handled<ResB, E>,
    content_length: Option<HeaderValue>,
) -> Result<Response<ResponseBody<ResB>>, E> {
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

/// The ending of a response the store cannot hold. One the storage policy would not store
/// anyway (5xx, 429, …) releases the key as usual. Otherwise the handler's work is done and must
/// not run again: the key is completed with a [`RefusalKind::NotReplayable`] answer, which
/// retries get (with `Idempotent-Replayed`), while the first client still receives the whole
/// response.
fn not_replayable(
    settings: &Settings,
    parts: &http::response::Parts,
    trailers: Option<&http::HeaderMap>,
    why: String,
) -> Ending {
    if !settings
        .storage
        .should_store(parts.status, &parts.headers, trailers)
    {
        return Ending::Release;
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
    Ending::Complete {
        outcome: Outcome::new(parts.status.as_u16(), stored.encode()),
        content_length: None,
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

/// Whether a response's header and trailer fields fit the stored-response bounds.
fn within_bounds(settings: &Settings, headers: &Survey, trailers: Option<&Survey>) -> bool {
    let trailers = trailers.copied().unwrap_or_default();
    headers.fields + trailers.fields <= settings.max_stored_headers
        && headers.bytes + trailers.bytes <= settings.max_stored_header_bytes
}
