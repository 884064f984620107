//! The business data: orders and their states, coupons, and the JSON the routes speak.

use serde::{Deserialize, Serialize};

/// An order id, assigned by the repository.
pub type OrderId = u64;

/// A user id, chosen by the client.
pub type UserId = u64;

/// Where an order is in its life. Only `WAIT_PAY → PAID` and `WAIT_PAY → CANCELLED` exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Created, waiting for the payment gateway's callback.
    WaitPay,
    /// Paid: the callback was applied and the coupon granted.
    Paid,
    /// Cancelled before payment.
    Cancelled,
    /// Reserved by a checkout (`POST /checkout`), its capture under way.
    Reserved,
}

impl OrderStatus {
    /// `"WAIT_PAY"`, `"PAID"` or `"CANCELLED"`, as the JSON and SQL repositories write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitPay => "WAIT_PAY",
            Self::Paid => "PAID",
            Self::Cancelled => "CANCELLED",
            Self::Reserved => "RESERVED",
        }
    }

    /// Parses [`OrderStatus::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "WAIT_PAY" => Some(Self::WaitPay),
            "PAID" => Some(Self::Paid),
            "CANCELLED" => Some(Self::Cancelled),
            "RESERVED" => Some(Self::Reserved),
            _ => None,
        }
    }
}

/// An order as the routes return it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The order's id.
    pub order_id: OrderId,
    /// Who placed it (and receives the coupon).
    pub user_id: UserId,
    /// The amount, in cents.
    pub amount_cents: u64,
    /// Where it is in its life.
    pub status: OrderStatus,
    /// The gateway's trade number, once paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trade_no: Option<String>,
}

/// The body of `POST /orders`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOrder {
    /// Who places the order.
    pub user_id: UserId,
    /// The amount, in cents.
    pub amount_cents: u64,
}

/// The body of `POST /payments/callback`, as the payment gateway sends it (no header key: the
/// trade number is the idempotency key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentCallback {
    /// The gateway's trade number, unique per payment.
    pub trade_no: String,
    /// The order it pays.
    pub order_id: OrderId,
}

/// The body of `GET /users/{user_id}/coupons`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CouponCount {
    /// The user.
    pub user_id: UserId,
    /// How many coupons the user holds.
    pub count: u64,
}
