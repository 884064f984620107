//! The middleware both idempotency layers ([`IdempotencyLayer`](crate::IdempotencyLayer) and
//! the transactional layer) wrap a service in, laid out as tower's middleware are: the
//! `service` ([`GuardedService`]), its `future` ([`ResponseFuture`]) and the `guard` each layer
//! implements to say what a guarded request runs.

mod future;
mod guard;
mod service;

pub(crate) use future::GatedFuture;
pub use future::ResponseFuture;
pub(crate) use guard::{Answered, Exchange, Guard, Guarded};
pub use service::GuardedService;
