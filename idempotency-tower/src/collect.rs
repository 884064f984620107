//! Collecting bodies once, within a limit.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::Body;
use http_body_util::BodyExt;

/// Appends chunks, keeping a single chunk as is (no copy).
#[derive(Default)]
struct Accumulator {
    first: Option<Bytes>,
    rest: Option<BytesMut>,
    len: usize,
}

impl Accumulator {
    fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if chunk.is_empty() {
            return;
        }
        match (&mut self.first, &mut self.rest) {
            (None, _) => self.first = Some(chunk),
            (Some(first), None) => {
                let mut joined = BytesMut::with_capacity((first.len() + chunk.len()) * 2);
                joined.extend_from_slice(first);
                joined.extend_from_slice(&chunk);
                self.rest = Some(joined);
            }
            (Some(_), Some(joined)) => joined.extend_from_slice(&chunk),
        }
    }

    fn finish(self) -> Bytes {
        match (self.first, self.rest) {
            (_, Some(joined)) => joined.freeze(),
            (Some(first), None) => first,
            (None, None) => Bytes::new(),
        }
    }
}

/// Why a request body could not be collected.
pub(crate) enum RequestCollectError {
    TooLarge,
    Stream,
    /// The body did not arrive within the read timeout.
    TimedOut,
}

pin_project_lite::pin_project! {
    /// Collects a request body of at most `limit` bytes (and its trailers), within `timeout` of
    /// the first wait for it ([`collect_request`]).
    ///
    /// A hand-written future, for its size (it lives in every guarded request's boxed
    /// future): the body is kept once (an `async` block keeps it twice), and the timer is set
    /// up, boxed, only if the body makes the reader wait.
    pub(crate) struct CollectRequest<B> {
        #[pin]
        body: B,
        limit: usize,
        timeout: Duration,
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
        data: Accumulator,
        // Boxed: rare outside gRPC.
        trailers: Option<Box<HeaderMap>>,
        too_large: bool,
    }
}

/// Collects a request body of at most `limit` bytes (and its trailers), within `timeout` of
/// the first wait for it.
pub(crate) fn collect_request<B: Body>(
    body: B,
    limit: usize,
    timeout: Duration,
) -> CollectRequest<B> {
    CollectRequest {
        too_large: body.size_hint().lower() > limit as u64,
        body,
        limit,
        timeout,
        deadline: None,
        data: Accumulator::default(),
        trailers: None,
    }
}

impl<B: Body> Future for CollectRequest<B> {
    type Output = Result<(Bytes, Option<HeaderMap>), RequestCollectError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if *this.too_large {
            return Poll::Ready(Err(RequestCollectError::TooLarge));
        }
        loop {
            let frame = match this.body.as_mut().poll_frame(cx) {
                Poll::Ready(Some(frame)) => frame.map_err(|_| RequestCollectError::Stream)?,
                Poll::Ready(None) => {
                    let data = std::mem::take(this.data).finish();
                    return Poll::Ready(Ok((data, this.trailers.take().map(|map| *map))));
                }
                Poll::Pending => {
                    let timeout = *this.timeout;
                    let sleep = this
                        .deadline
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                    return match sleep.as_mut().poll(cx) {
                        Poll::Ready(()) => Poll::Ready(Err(RequestCollectError::TimedOut)),
                        Poll::Pending => Poll::Pending,
                    };
                }
            };
            match frame.into_data() {
                Ok(mut chunk) => {
                    let chunk = chunk.copy_to_bytes(chunk.remaining());
                    if this.data.len + chunk.len() > *this.limit {
                        return Poll::Ready(Err(RequestCollectError::TooLarge));
                    }
                    this.data.push(chunk);
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        this.trailers.get_or_insert_with(Box::default).extend(more);
                    }
                }
            }
        }
    }
}

/// A response body as collected for storage.
pub(crate) enum Collected<B: Body> {
    /// The whole body and its trailers.
    Complete(Bytes, Option<HeaderMap>),
    /// Over the limit: what was read so far and the unread rest.
    Overflow(Bytes, B),
    /// The body failed after these bytes.
    Failed(Bytes, B::Error),
}

/// Collects a response body up to `limit` bytes.
///
/// Written for a small future (it lives in every new key's boxed work): the body is kept once
/// (an `async fn` would keep its argument twice), and trailers, rare outside gRPC, are boxed.
#[allow(clippy::manual_async_fn)] // an `async fn` would keep its arguments twice
pub(crate) fn collect_response<B>(mut body: B, limit: usize) -> impl Future<Output = Collected<B>>
where
    B: Body<Data = Bytes> + Unpin,
{
    async move {
        let mut data = Accumulator::default();
        let mut trailers: Option<Box<HeaderMap>> = None;
        loop {
            match body.frame().await {
                None => return Collected::Complete(data.finish(), trailers.map(|map| *map)),
                Some(Err(error)) => return Collected::Failed(data.finish(), error),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(chunk) => {
                        data.push(chunk);
                        if data.len > limit {
                            return Collected::Overflow(data.finish(), body);
                        }
                    }
                    Err(frame) => {
                        if let Ok(more) = frame.into_trailers() {
                            trailers.get_or_insert_with(Box::default).extend(more);
                        }
                    }
                },
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::Full;
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A body of several frames, as a network stream delivers it.
    struct Frames(VecDeque<Frame<Bytes>>);

    impl Frames {
        fn new(chunks: &[&'static str], trailer: bool) -> Self {
            let mut frames: VecDeque<_> = chunks
                .iter()
                .map(|c| Frame::data(Bytes::from_static(c.as_bytes())))
                .collect();
            if trailer {
                let mut map = HeaderMap::new();
                map.insert("grpc-status", http::HeaderValue::from_static("0"));
                frames.push_back(Frame::trailers(map));
            }
            Self(frames)
        }
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    #[tokio::test]
    async fn single_chunk_is_not_copied() {
        let original = Bytes::from_static(b"hello");
        let Ok((data, trailers)) =
            collect_request(Full::new(original.clone()), 5, Duration::from_secs(30)).await
        else {
            panic!("within the limit");
        };
        assert_eq!(data.as_ptr(), original.as_ptr());
        assert!(trailers.is_none());
        assert!(matches!(
            collect_request(Full::new(original), 4, Duration::from_secs(30)).await,
            Err(RequestCollectError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn chunks_are_joined_and_limited() {
        let Ok((data, trailers)) = collect_request(
            Frames::new(&["ab", "cd", "e"], true),
            5,
            Duration::from_secs(30),
        )
        .await
        else {
            panic!("within the limit");
        };
        assert_eq!(data, "abcde");
        assert_eq!(trailers.unwrap()["grpc-status"], "0");
        assert!(matches!(
            collect_request(
                Frames::new(&["ab", "cd", "e"], false),
                4,
                Duration::from_secs(30)
            )
            .await,
            Err(RequestCollectError::TooLarge)
        ));
    }

    #[tokio::test]
    async fn response_overflow_keeps_the_rest() {
        match collect_response(Frames::new(&["ab", "cd", "ef"], true), 3).await {
            Collected::Overflow(prefix, rest) => {
                assert_eq!(prefix, "abcd");
                let rest = rest.collect().await.unwrap();
                assert!(rest.trailers().is_some());
                assert_eq!(rest.to_bytes(), "ef");
            }
            _ => panic!("over the limit"),
        }
        match collect_response(Frames::new(&["ab", "cd"], true), 4).await {
            Collected::Complete(data, trailers) => {
                assert_eq!(data, "abcd");
                assert!(trailers.is_some());
            }
            _ => panic!("within the limit"),
        }
    }
}
