//! Wake-ups of the duplicates waiting while a key is in flight
//! ([`Store::wake_ups`](idempotency_core::Store::wake_ups)), by `LISTEN`/`NOTIFY`.
//!
//! A waiting process flags the record (`waited`, once per key and process) after its listener
//! is live; the complete and release statements call `pg_notify` on the table's channel, with
//! the key as payload, for flagged rows only (a `NOTIFY` serialises the commits that send it,
//! so the common, unwaited completion sends none). One listener per store (shared by its
//! clones) holds one connection of the pool, `LISTEN`s on the table's channel, and wakes the
//! receivers of the keys waited for in this process: one entry per key, however many wait.
//!
//! A lost connection drops every entry (the receivers err, and the waiters poll as without
//! wake-ups); the listener reconnects and listens again before it reports the loss.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{OnceCell, oneshot, watch};

use idempotency_core::StorageKey;

/// The listener of one store's table, started by the first wait.
#[derive(Default)]
pub(crate) struct WakeUps {
    listening: OnceCell<Option<Listening>>,
}

/// A live listener: the receivers it wakes, and its task's stop (dropped with the store).
struct Listening {
    keys: Arc<Keys>,
    _stop: oneshot::Sender<()>,
}

/// The keys waited for in this process, each with the sender its receivers watch; `None` once
/// the listener stopped.
struct Keys(Mutex<Option<HashMap<[u8; 32], watch::Sender<()>>>>);

impl Keys {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<[u8; 32], watch::Sender<()>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receiver of `key`'s wake-ups (entries nobody watches any more go); `None` once the
    /// listener stopped.
    fn subscribe(&self, key: &StorageKey) -> Option<watch::Receiver<()>> {
        let mut keys = self.lock();
        let keys = keys.as_mut()?;
        keys.retain(|_, sender| !sender.is_closed());
        let sender = keys.entry(key.0).or_insert_with(|| watch::channel(()).0);
        Some(sender.subscribe())
    }

    /// Wakes the receivers of the key a notification names (hex).
    fn wake(&self, payload: &str) {
        if let Some(key) = key_of(payload)
            && let Some(sender) = self.lock().as_ref().and_then(|keys| keys.get(&key))
        {
            sender.send_replace(());
        }
    }

    /// Drops every entry (their receivers err); with `stopped`, every later one too.
    fn drop_all(&self, stopped: bool) {
        let mut keys = self.lock();
        if stopped {
            *keys = None;
        } else if let Some(keys) = keys.as_mut() {
            keys.clear();
        }
    }
}

/// The storage key a notification's payload names (`encode(key_hash, 'hex')`).
fn key_of(payload: &str) -> Option<[u8; 32]> {
    let mut key = [0u8; 32];
    if payload.len() != 64 {
        return None;
    }
    for (byte, pair) in key.iter_mut().zip(payload.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}

impl WakeUps {
    /// A receiver of `key`'s wake-ups on `channel`, live when returned (the listener listens
    /// before the first one is given); `None` if the listener could not start.
    pub(crate) async fn subscribe(
        &self,
        pool: &PgPool,
        channel: &str,
        key: &StorageKey,
    ) -> Option<watch::Receiver<()>> {
        let listening = self
            .listening
            .get_or_init(|| listen(pool.clone(), channel.to_owned()))
            .await
            .as_ref()?;
        listening.keys.subscribe(key)
    }
}

/// Connects a listener on `channel` and spawns its task.
async fn listen(pool: PgPool, channel: String) -> Option<Listening> {
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%error, "no wake-ups: the listener could not connect; waiters poll");
            return None;
        }
    };
    if let Err(error) = listener.listen(&channel).await {
        tracing::warn!(%error, "no wake-ups: LISTEN failed; waiters poll");
        return None;
    }
    let keys = Arc::new(Keys(Mutex::new(Some(HashMap::new()))));
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(run(listener, Arc::clone(&keys), stopped));
    Some(Listening { keys, _stop: stop })
}

/// Wakes the keys notifications name until the store goes; a lost connection (reconnected and
/// listening again when reported) drops every entry, so their waiters poll.
async fn run(mut listener: PgListener, keys: Arc<Keys>, mut stopped: oneshot::Receiver<()>) {
    loop {
        let notified = {
            let mut received = std::pin::pin!(listener.try_recv());
            std::future::poll_fn(|cx| {
                if std::pin::Pin::new(&mut stopped).poll(cx).is_ready() {
                    return std::task::Poll::Ready(None);
                }
                received.as_mut().poll(cx).map(Some)
            })
            .await
        };
        let Some(notified) = notified else {
            // The store is gone.
            return;
        };
        match notified {
            Ok(Some(notification)) => keys.wake(notification.payload()),
            Ok(None) => keys.drop_all(false),
            Err(error) => {
                // The pool closed, or the reconnection failed: waiters poll from now on.
                tracing::warn!(%error, "wake-ups listener stopped; waiters poll");
                keys.drop_all(true);
                return;
            }
        }
    }
}
