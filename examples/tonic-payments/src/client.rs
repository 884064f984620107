//! The client side: retry after a deadline, with the same key, until an answer comes.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

use super::proto::payments_client::PaymentsClient;
use super::proto::{CreateOrderRequest, Order};

/// One try of [`create_order_with_retries`].
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The status code of the try (`Ok` for the answer).
    pub code: Code,
    /// Whether the answer was a replay (`idempotent-replayed: true`).
    pub replayed: bool,
}

/// `message` with metadata `idempotency-key: key`, from the example's caller (`authorization:
/// Bearer demo-client`).
pub fn with_key<T>(message: T, key: &str) -> Result<Request<T>, Status> {
    let mut request = Request::new(message);
    let value: MetadataValue<_> = key
        .parse()
        .map_err(|_| Status::invalid_argument("idempotency key is not valid metadata"))?;
    request.metadata_mut().insert("idempotency-key", value);
    // The example's caller (see `server::principal`).
    request.metadata_mut().insert(
        "authorization",
        MetadataValue::from_static("Bearer demo-client"),
    );
    Ok(request)
}

/// Calls `CreateOrder` with `deadline` per try, retrying with the **same key** after
/// `DEADLINE_EXCEEDED` (or `CANCELLED`, which a tonic server answers when the deadline it was
/// sent passes), `ABORTED` (the first try still running) and `UNAVAILABLE`, up to
/// `tries` times. Returns the answer and the log of tries.
pub async fn create_order_with_retries(
    client: &mut PaymentsClient<Channel>,
    order: CreateOrderRequest,
    key: &str,
    deadline: Duration,
    tries: usize,
) -> (Result<Response<Order>, Status>, Vec<Attempt>) {
    let mut log = Vec::new();
    let mut pause = Duration::from_millis(50);
    let mut last = Err(Status::unknown("no try made"));
    for _ in 0..tries {
        let mut request = match with_key(order.clone(), key) {
            Ok(request) => request,
            Err(status) => return (Err(status), log),
        };
        request.set_timeout(deadline);
        last = client.create_order(request).await;
        let (code, replayed) = match &last {
            Ok(response) => (
                Code::Ok,
                response
                    .metadata()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true"),
            ),
            Err(status) => (status.code(), false),
        };
        log.push(Attempt { code, replayed });
        if !matches!(
            code,
            Code::DeadlineExceeded | Code::Cancelled | Code::Aborted | Code::Unavailable
        ) {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
    (last, log)
}
