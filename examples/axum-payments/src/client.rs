//! A minimal HTTP/1.1 client over one keep-alive connection (hyper), for the demo, the load
//! generator and the tests.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tokio::net::TcpStream;

use super::callers::DEMO_TOKEN;

/// The header a replayed response carries.
pub const REPLAYED: &str = "idempotent-replayed";

/// Why a request failed before a response arrived.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting failed.
    #[error("connect: {0}")]
    Connect(#[from] std::io::Error),
    /// The HTTP exchange failed.
    #[error("http: {0}")]
    Http(#[from] hyper::Error),
    /// The request could not be built.
    #[error("request: {0}")]
    Request(#[from] http::Error),
    /// A concurrent sender task failed.
    #[error("task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A body was not the JSON expected.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The server answered with an unexpected status.
    #[error("unexpected {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// The body, as text.
        body: String,
    },
}

/// A response, body read in full.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// Fails with [`ClientError::Status`] unless the status is `expected`.
    pub fn expect_status(self, expected: StatusCode) -> Result<Self, ClientError> {
        if self.status == expected {
            Ok(self)
        } else {
            Err(ClientError::Status {
                status: self.status,
                body: String::from_utf8_lossy(&self.body).into_owned(),
            })
        }
    }

    /// Decodes the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// Whether it carries `Idempotent-Replayed: true`.
    pub fn is_replay(&self) -> bool {
        self.headers
            .get(REPLAYED)
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"))
    }

    /// The `Content-Type`, if any.
    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
    }
}

/// One keep-alive HTTP/1.1 connection (requests on it run one after the other).
#[derive(Debug)]
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl Connection {
    /// Connects to `addr` (`TCP_NODELAY` on).
    pub async fn open(addr: SocketAddr) -> Result<Self, ClientError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "client connection ended");
            }
        });
        let host = HeaderValue::from_str(&addr.to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        Ok(Self { sender, host })
    }

    /// Sends a request (a `Host` header is added) and reads the whole response.
    pub async fn send(&mut self, mut request: Request<Full<Bytes>>) -> Result<Reply, ClientError> {
        request
            .headers_mut()
            .entry(HOST)
            .or_insert_with(|| self.host.clone());
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Sends one request on a new connection.
pub async fn send_once(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<Reply, ClientError> {
    Connection::open(addr).await?.send(request).await
}

/// A request with an optional `Idempotency-Key` and an optional JSON body, from the demo's
/// caller (`Authorization: Bearer` [`DEMO_TOKEN`]; replace the header to call as another).
pub fn request(
    method: Method,
    path: &str,
    idempotency_key: Option<&str>,
    json_body: Option<Bytes>,
) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(AUTHORIZATION, format!("Bearer {DEMO_TOKEN}"));
    if json_body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    if let Some(key) = idempotency_key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Full::new(json_body.unwrap_or_default()))
}

/// `POST path` with a JSON body and an optional `Idempotency-Key`.
pub fn post_json(
    path: &str,
    idempotency_key: Option<&str>,
    body: &serde_json::Value,
) -> Result<Request<Full<Bytes>>, http::Error> {
    request(
        Method::POST,
        path,
        idempotency_key,
        Some(Bytes::from(body.to_string())),
    )
}

/// `GET path`.
pub fn get(path: &str) -> Result<Request<Full<Bytes>>, http::Error> {
    request(Method::GET, path, None, None)
}
