//! HTTP as a relay target: a POST per message carrying its id as `Idempotency-Key`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::table::Claimed;

use crate::target::{DeliveryError, Target};

/// The header that carries the business key (`Idempotency-Key` carries the message id).
pub const BUSINESS_KEY_HEADER: &str = "business-key";

/// The most bytes of an answer's body the target reads by default (64 KiB): enough for any
/// problem document; a longer body is left unread and its connection closed.
pub const DEFAULT_MAX_ANSWER_BODY: usize = 64 * 1024;

/// The most characters of a refusing answer's body kept in the message's last error.
const ERROR_EXCERPT: usize = 200;

/// POSTs each message's payload to `base` followed by its topic (`http://coupons:8080` and
/// `/grants` make `http://coupons:8080/grants`), with the message id as `Idempotency-Key`, so an
/// endpoint behind `idempotency-tower`'s layer runs a redelivered message once and replays its
/// answer. A 2xx answer delivers the message. The receiver's idempotency layer answering that
/// it is still running this key (an earlier delivery is in flight there: `409 Conflict` with
/// `Retry-After` and a problem+json body typed `…in-flight`), `429 Too Many Requests` and
/// `503 Service Unavailable` defer it: given back uncounted, due again after the answer's
/// `Retry-After` (in seconds) or the relay's first backoff step. Any other 409 is the
/// receiver's business answer ("already cancelled"): refused, counted like any error status. `404 Not Found` has
/// [no destination](DeliveryError::NoDestination) (the receiver's route is not deployed yet):
/// deferred uncounted while the message is younger than the relay's
/// [`with_destination_grace`](crate::Relay::with_destination_grace). Any other status refuses it
/// (counted, retried, dead after `max_attempts`); no answer within the timeout, or no
/// connection, makes it unreachable. At most
/// [`with_max_answer_body`](Self::with_max_answer_body) bytes of an answer are read (the
/// first characters of a refusing one are kept as the message's last error). The messages of a batch are posted concurrently (a batch
/// holds at most one message per aggregate, so ordering holds). Plain `http://`; with the
/// feature `tls`, also `https://` (rustls, Mozilla's roots unless
/// [`with_tls_config`](Self::with_tls_config) says otherwise). A certificate the target does not
/// trust fails the handshake: unreachable, so the messages wait uncounted until the
/// configuration is fixed.
pub struct HttpTarget {
    base: String,
    content_type: HeaderValue,
    timeout: Duration,
    max_answer_body: usize,
    client: Client<Connector, Full<Bytes>>,
}

/// How the target connects: plain TCP, or TLS where the base says `https://` (feature `tls`).
#[cfg(feature = "tls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "tls"))]
type Connector = HttpConnector;

/// The rustls the `tls` feature uses, to build a [`ClientConfig`](rustls::ClientConfig) for
/// [`HttpTarget::with_tls_config`].
#[cfg(feature = "tls")]
pub use rustls;

/// A client over `connector`.
fn client(connector: Connector) -> Client<Connector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(connector)
}

/// A connector speaking TLS with `config` to `https://` bases and plain TCP to `http://` ones.
#[cfg(feature = "tls")]
fn connector(config: rustls::ClientConfig) -> Connector {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build()
}

/// The default TLS connector: ring, TLS 1.2 and 1.3, Mozilla's roots (webpki-roots).
#[cfg(feature = "tls")]
fn default_connector() -> Connector {
    let provider = rustls::crypto::ring::default_provider();
    match hyper_rustls::HttpsConnectorBuilder::new().with_provider_and_webpki_roots(provider) {
        Ok(builder) => builder.https_or_http().enable_http1().build(),
        Err(error) => unreachable!("ring supports TLS 1.2 and 1.3: {error}"),
    }
}

impl HttpTarget {
    /// A target posting under `base` (`http://host:port`, perhaps with a path prefix), JSON
    /// bodies, 10 s per request.
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            content_type: HeaderValue::from_static("application/json"),
            timeout: Duration::from_secs(10),
            max_answer_body: DEFAULT_MAX_ANSWER_BODY,
            #[cfg(feature = "tls")]
            client: client(default_connector()),
            #[cfg(not(feature = "tls"))]
            client: client(HttpConnector::new()),
        }
    }

    /// Speaks TLS to `https://` bases with `config` (its roots, client certificate, versions)
    /// instead of Mozilla's roots: a private CA, mutual TLS. Build it with the re-exported
    /// [`rustls`] and its ring provider.
    #[cfg(feature = "tls")]
    pub fn with_tls_config(mut self, config: rustls::ClientConfig) -> Self {
        self.client = client(connector(config));
        self
    }

    /// The `Content-Type` of the bodies.
    pub fn with_content_type(mut self, content_type: HeaderValue) -> Self {
        self.content_type = content_type;
        self
    }

    /// How long a request may take before the message counts as unreachable.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reads at most `bytes` of an answer's body ([`DEFAULT_MAX_ANSWER_BODY`] by default): a
    /// receiver cannot make the relay hold more, whatever it sends.
    pub fn with_max_answer_body(mut self, bytes: usize) -> Self {
        self.max_answer_body = bytes;
        self
    }

    async fn post(&self, claimed: &Claimed) -> Result<(), DeliveryError> {
        let message = &claimed.message;
        let separator = if message.topic.starts_with('/') {
            ""
        } else {
            "/"
        };
        let uri: Uri = format!("{}{separator}{}", self.base, message.topic)
            .parse()
            .map_err(|error| DeliveryError::Refused(format!("not a URI: {error}")))?;
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, self.content_type.clone())
            .header("idempotency-key", message.id.as_str())
            .header(BUSINESS_KEY_HEADER, message.key.as_str())
            .body(Full::new(Bytes::copy_from_slice(&message.payload)))
            .map_err(|error| DeliveryError::Refused(error.to_string()))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| DeliveryError::Unreachable(error.to_string()))?;
            let (answer, body) = response.into_parts();
            let status = answer.status;
            let retry_after = retry_after(&answer.headers);
            // Read the answer to its end (so the connection can be reused), within the bound: a
            // longer body is dropped unread, closing its connection.
            let body = Limited::new(body, self.max_answer_body)
                .collect()
                .await
                .map(|collected| collected.to_bytes())
                .ok();
            let deferred = || DeliveryError::Deferred {
                reason: format!("answered {status}"),
                retry_after,
            };
            match status {
                status if status.is_success() => Ok(()),
                StatusCode::CONFLICT if in_flight_at_receiver(&answer.headers, body.as_ref()) => {
                    Err(deferred())
                }
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Err(deferred()),
                StatusCode::NOT_FOUND => Err(DeliveryError::NoDestination(format!(
                    "answered {status}{}",
                    excerpt(body.as_ref())
                ))),
                status => Err(DeliveryError::Refused(format!(
                    "answered {status}{}",
                    excerpt(body.as_ref())
                ))),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| {
                Err(DeliveryError::Unreachable(format!(
                    "no answer within {:?}",
                    self.timeout
                )))
            })
    }
}

/// A `Retry-After` in seconds (an HTTP date is not honoured: the relay's backoff applies).
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// Whether a 409 is `idempotency-tower`'s "this key is in flight" refusal: `Retry-After`, an
/// `application/problem+json` body whose `status` is 409 and whose `type` ends in the
/// `in-flight` slug (`urn:idempotency:in-flight`, or under the receiver's own type base).
fn in_flight_at_receiver(headers: &http::HeaderMap, body: Option<&Bytes>) -> bool {
    let problem_json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| {
            media
                .trim()
                .eq_ignore_ascii_case("application/problem+json")
        });
    if !problem_json || !headers.contains_key(http::header::RETRY_AFTER) {
        return false;
    }
    let Some(problem) =
        body.and_then(|body| serde_json::from_slice::<serde_json::Value>(body).ok())
    else {
        return false;
    };
    let slug = problem
        .get("type")
        .and_then(serde_json::Value::as_str)
        .and_then(|kind| kind.rsplit([':', '/']).next());
    slug == Some("in-flight") && problem.get("status") == Some(&serde_json::Value::from(409))
}

/// `": "` and the first characters of a refusing answer's body, for the message's last error
/// (nothing when the body is empty or was too long to read).
fn excerpt(body: Option<&Bytes>) -> String {
    let text = String::from_utf8_lossy(body.map_or(&[][..], |body| &body[..]));
    let text: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(ERROR_EXCERPT)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl Target for HttpTarget {
    async fn deliver(&self, batch: &[Claimed]) -> Vec<Result<(), DeliveryError>> {
        futures_util::future::join_all(batch.iter().map(|claimed| self.post(claimed))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(content_type: &'static str, retry: bool) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        if retry {
            headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        headers
    }

    #[test]
    fn only_the_in_flight_problem_is_recognised() {
        let in_flight = Bytes::from_static(
            br#"{"type":"urn:idempotency:in-flight","title":"Request in progress","status":409}"#,
        );
        let headers = problem("application/problem+json", true);
        assert!(in_flight_at_receiver(&headers, Some(&in_flight)));
        let own_base = Bytes::from_static(
            br#"{"type":"https://api.example.com/problems/in-flight","status":409}"#,
        );
        assert!(in_flight_at_receiver(&headers, Some(&own_base)));
        assert!(!in_flight_at_receiver(&headers, None), "no body read");
        assert!(
            !in_flight_at_receiver(
                &problem("application/problem+json", false),
                Some(&in_flight)
            ),
            "no Retry-After"
        );
        assert!(
            !in_flight_at_receiver(&problem("application/json", true), Some(&in_flight)),
            "not a problem document"
        );
        for other in [
            &br#"{"type":"urn:idempotency:token-rejected","status":409}"#[..],
            br#"{"type":"urn:shop:already-cancelled","status":409}"#,
            br#"{"type":"urn:idempotency:not-in-flight","status":409}"#,
            br#"{"type":"urn:idempotency:in-flight","status":503}"#,
            b"in-flight",
        ] {
            assert!(
                !in_flight_at_receiver(&headers, Some(&Bytes::from_static(other))),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[test]
    fn an_excerpt_is_short_and_on_one_line() {
        assert_eq!(excerpt(None), "");
        assert_eq!(excerpt(Some(&Bytes::from_static(b" \n"))), "");
        assert_eq!(
            excerpt(Some(&Bytes::from_static(b"order\ncancelled"))),
            ": order cancelled"
        );
        let long = Bytes::from(vec![b'x'; 1000]);
        assert_eq!(excerpt(Some(&long)).len(), 2 + ERROR_EXCERPT);
    }

    #[test]
    fn retry_after_in_seconds_only() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static(" 3 "));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
