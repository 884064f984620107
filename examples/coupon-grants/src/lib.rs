//! The incident's coupon service, as both consumer examples (`rabbitmq-consumer`,
//! `nats-consumer`) run it behind their broker.
//!
//! Every trade's "paid" event — JSON `{"trade_no": "T1", "user_id": 7}` — grants one coupon: a
//! row in the PostgreSQL table `coupon_grants (id, trade_no, user_id, granted_at)`. The trade
//! number is the business key. The dedup record is claimed **in the coupon's own transaction**
//! (`two_tier::SqlTruth`, table `coupon_grant_dedup`): the coupon and its record commit
//! together, or neither does. With `REDIS_URL` set, a Redis record in front answers most
//! duplicates with one round trip (two tiers); without it, an in-process memory store does, and
//! the SQL record decides either way.
//!
//! What the grant produced (`{"coupon_id": 17}`) is the key's outcome on both tiers: every later
//! delivery of the trade is answered with it.
//!
//! | variable | default | what |
//! |---|---|---|
//! | `DATABASE_URL` | `postgres://postgres@127.0.0.1:5432/test` | where `coupon_grants` and its dedup records live |
//! | `REDIS_URL` | (none: one SQL tier, memory in front) | the fast tier |
//! | `QUEUE` | `coupon-grant` | the RabbitMQ queue, or the NATS JetStream subject |
//! | `CONCURRENCY` | `16` | deliveries handled at once |
//! | `HANDLER_DELAY_MS` | `0` | fault drill: hold each grant's transaction this long before its commit |
//! | `ACK_DELAY_MS` | `0` | fault drill: hold each grant this long after its commit, before the ack |

#[cfg(feature = "drill")]
pub mod drill;
mod lifecycle;
mod producer;
mod service;
mod settings;
mod table;

pub use lifecycle::{init_logging, shutdown_signal, summary};
pub use producer::{Publication, USAGE};
pub use service::{Granted, Paid, coupon_consumer};
pub use settings::{DEFAULT_DATABASE_URL, DEFAULT_QUEUE, Settings};
pub use table::{coupons_per_trade, migrate};
