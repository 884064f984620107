//! The request body the inner service sees and the response body the layer returns.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The request body handed to the inner service: the original stream where the layer did
    /// not need to read it, or the bytes the layer collected once (no copy).
    pub struct RequestBody<B> {
        #[pin]
        kind: RequestKind<B>,
    }
}

pin_project! {
    #[project = RequestProj]
    enum RequestKind<B> {
        Streaming { #[pin] body: B },
        Buffered { held: Held },
    }
}

impl<B> RequestBody<B> {
    /// The original body, streamed through.
    pub fn streaming(body: B) -> Self {
        Self {
            kind: RequestKind::Streaming { body },
        }
    }

    /// A body the layer already collected.
    pub fn buffered(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            kind: RequestKind::Buffered {
                held: Held::new(data, trailers),
            },
        }
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for RequestBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            RequestKind::Streaming { body } => f.debug_tuple("Streaming").field(body).finish(),
            RequestKind::Buffered { held } => f.debug_tuple("Buffered").field(&held.data).finish(),
        }
    }
}

impl<B> Body for RequestBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            RequestProj::Streaming { body } => body.poll_frame(cx).map(|frame| {
                frame.map(|frame| {
                    frame.map(|frame| {
                        frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
                    })
                })
            }),
            RequestProj::Buffered { held } => Poll::Ready(held.next_frame().map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            RequestKind::Streaming { body } => body.is_end_stream(),
            RequestKind::Buffered { held } => held.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            RequestKind::Streaming { body } => body.size_hint(),
            RequestKind::Buffered { held } => held.size_hint(),
        }
    }
}

/// Bytes a body holds (none where they are empty), then the trailers that end it: what both
/// bodies give once the layer has the whole of it.
struct Held {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Held {
    /// `data`, then `trailers`.
    fn new(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            data: Some(data).filter(|d| !d.is_empty()),
            trailers,
        }
    }

    /// The next frame: the data, then the trailers, then none.
    fn next_frame(&mut self) -> Option<Frame<Bytes>> {
        self.data
            .take()
            .map(Frame::data)
            .or_else(|| self.trailers.take().map(Frame::trailers))
    }

    /// Whether every frame was given.
    fn is_empty(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    /// The exact length of the data still held.
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

pin_project! {
    /// The response body: the inner service's body streamed through, or bytes the layer holds
    /// (a replay, a refusal, or the first answer that the layer collected to store).
    pub struct ResponseBody<B: Body> {
        #[pin]
        kind: ResponseKind<B>,
    }
}

pin_project! {
    #[project = ResponseProj]
    enum ResponseKind<B: Body> {
        Inner { #[pin] body: B },
        // The error, where the inner body failed, comes between the data and the trailers.
        Buffered { held: Held, error: Option<B::Error> },
        Partial { prefix: Option<Bytes>, #[pin] rest: B },
    }
}

impl<B: Body> ResponseBody<B> {
    /// The inner service's body, streamed through.
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: ResponseKind::Inner { body },
        }
    }

    /// Held bytes, then trailers.
    pub(crate) fn buffered(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            kind: ResponseKind::Buffered {
                held: Held::new(data, trailers),
                error: None,
            },
        }
    }

    /// What was collected before the inner body failed, then its error.
    pub(crate) fn failed(data: Bytes, error: B::Error) -> Self {
        Self {
            kind: ResponseKind::Buffered {
                held: Held::new(data, None),
                error: Some(error),
            },
        }
    }

    /// What was collected, then the rest of the inner body streamed.
    pub(crate) fn partial(prefix: Bytes, rest: B) -> Self {
        Self {
            kind: ResponseKind::Partial {
                prefix: Some(prefix).filter(|d| !d.is_empty()),
                rest,
            },
        }
    }
}

impl<B: Body> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            ResponseKind::Inner { .. } => "Inner",
            ResponseKind::Buffered { .. } => "Buffered",
            ResponseKind::Partial { .. } => "Partial",
        };
        f.debug_tuple("ResponseBody").field(&kind).finish()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            ResponseProj::Inner { body } => body.poll_frame(cx),
            ResponseProj::Buffered { held, error } => {
                if let Some(data) = held.data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                if let Some(error) = error.take() {
                    return Poll::Ready(Some(Err(error)));
                }
                Poll::Ready(held.next_frame().map(Ok))
            }
            ResponseProj::Partial { prefix, rest } => match prefix.take() {
                Some(prefix) => Poll::Ready(Some(Ok(Frame::data(prefix)))),
                None => rest.poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            ResponseKind::Inner { body } => body.is_end_stream(),
            ResponseKind::Buffered { held, error } => held.is_empty() && error.is_none(),
            ResponseKind::Partial { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            ResponseKind::Inner { body } => body.size_hint(),
            ResponseKind::Buffered { held, .. } => held.size_hint(),
            ResponseKind::Partial { prefix, rest } => {
                let extra = prefix.as_ref().map_or(0, |p| p.len() as u64);
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + extra);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + extra);
                }
                hint
            }
        }
    }
}
