//! The in-process repository: one mutex over orders and coupons.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use idempotency_core::BoxFuture;

use super::model::{NewOrder, Order, OrderId, OrderStatus, UserId};
use super::repo::{PaymentsRepo, RepoError, Transition};

/// Orders and coupons in memory. Every transition happens under one lock, so it is atomic.
#[derive(Debug, Default)]
pub struct MemoryRepo {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last_order_id: OrderId,
    orders: HashMap<OrderId, Order>,
    coupons: HashMap<UserId, u64>,
}

impl MemoryRepo {
    /// An empty repository.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn transition(
        &self,
        order_id: OrderId,
        from: OrderStatus,
        to: OrderStatus,
        on_applied: impl FnOnce(&mut Order, &mut HashMap<UserId, u64>),
    ) -> Transition {
        let mut state = self.lock();
        let State {
            orders, coupons, ..
        } = &mut *state;
        let Some(order) = orders.get_mut(&order_id) else {
            return Transition::NotFound;
        };
        if order.status == from {
            order.status = to;
            on_applied(order, coupons);
            Transition::Applied(order.clone())
        } else if order.status == to {
            Transition::AlreadyInTarget(order.clone())
        } else {
            Transition::Illegal(order.clone())
        }
    }
}

impl PaymentsRepo for MemoryRepo {
    fn create_order(&self, new: NewOrder) -> BoxFuture<'_, Result<Order, RepoError>> {
        let mut state = self.lock();
        state.last_order_id += 1;
        let order = Order {
            order_id: state.last_order_id,
            user_id: new.user_id,
            amount_cents: new.amount_cents,
            status: OrderStatus::WaitPay,
            trade_no: None,
        };
        state.orders.insert(order.order_id, order.clone());
        Box::pin(std::future::ready(Ok(order)))
    }

    fn order(&self, order_id: OrderId) -> BoxFuture<'_, Result<Option<Order>, RepoError>> {
        let order = self.lock().orders.get(&order_id).cloned();
        Box::pin(std::future::ready(Ok(order)))
    }

    fn pay<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Transition, RepoError>> {
        let transition = self.transition(
            order_id,
            OrderStatus::WaitPay,
            OrderStatus::Paid,
            |order, coupons| {
                order.trade_no = Some(trade_no.to_owned());
                *coupons.entry(order.user_id).or_default() += 1;
            },
        );
        Box::pin(std::future::ready(Ok(transition)))
    }

    fn cancel(&self, order_id: OrderId) -> BoxFuture<'_, Result<Transition, RepoError>> {
        let transition = self.transition(
            order_id,
            OrderStatus::WaitPay,
            OrderStatus::Cancelled,
            |_, _| {},
        );
        Box::pin(std::future::ready(Ok(transition)))
    }

    fn grant_coupon(&self, user_id: UserId) -> BoxFuture<'_, Result<(), RepoError>> {
        *self.lock().coupons.entry(user_id).or_default() += 1;
        Box::pin(std::future::ready(Ok(())))
    }

    fn mark_paid_unchecked<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Option<Order>, RepoError>> {
        let order = self.lock().orders.get_mut(&order_id).map(|order| {
            order.status = OrderStatus::Paid;
            order.trade_no = Some(trade_no.to_owned());
            order.clone()
        });
        Box::pin(std::future::ready(Ok(order)))
    }

    fn coupon_count(&self, user_id: UserId) -> BoxFuture<'_, Result<u64, RepoError>> {
        let count = self.lock().coupons.get(&user_id).copied().unwrap_or(0);
        Box::pin(std::future::ready(Ok(count)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn pay_grants_only_on_the_applied_transition() {
        let repo = MemoryRepo::new();
        let order = repo
            .create_order(NewOrder {
                user_id: 7,
                amount_cents: 1299,
            })
            .await
            .unwrap();
        let first = repo.pay(order.order_id, "T1").await.unwrap();
        assert!(matches!(first, Transition::Applied(ref o) if o.status == OrderStatus::Paid));
        let second = repo.pay(order.order_id, "T1").await.unwrap();
        assert!(matches!(second, Transition::AlreadyInTarget(_)));
        assert_eq!(repo.coupon_count(7).await.unwrap(), 1);
        assert_eq!(repo.pay(999, "T2").await.unwrap(), Transition::NotFound);

        let other = repo
            .create_order(NewOrder {
                user_id: 8,
                amount_cents: 1,
            })
            .await
            .unwrap();
        assert!(matches!(
            repo.cancel(other.order_id).await.unwrap(),
            Transition::Applied(_)
        ));
        assert!(matches!(
            repo.pay(other.order_id, "T3").await.unwrap(),
            Transition::Illegal(ref o) if o.status == OrderStatus::Cancelled
        ));
        assert_eq!(repo.coupon_count(8).await.unwrap(), 0);
    }
}
