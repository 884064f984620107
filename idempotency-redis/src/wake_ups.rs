//! Wake-ups of the duplicates waiting while a key is in flight ([`Store::wake_ups`]).
//!
//! The complete and release scripts end with `PUBLISH <record key> ""` (`SPUBLISH` on a
//! Cluster): the record's key is its channel too (channels and keys are apart), so the message
//! costs no round trip of its own and, on a Cluster, carrying the record's hash tag, stays on
//! the record's node. One listener per store (shared by its clones) holds one RESP3 connection
//! (on a Cluster, one per node, each subscribed to the channels of its slots) and subscribes
//! (`SUBSCRIBE`; `SSUBSCRIBE` on a Cluster) to the channels of the keys that have waiters in
//! this process: one subscription per key, however many wait, dropped (`UNSUBSCRIBE`,
//! `SUNSUBSCRIBE`) when the key's last waiter leaves. A message changes the key's receiver; the
//! engine then reads the record.
//!
//! A lost connection drops every subscription (the receivers err, and the waiters poll again
//! as without wake-ups); the next key to be waited for connects anew.
//!
//! [`Store::wake_ups`]: idempotency_core::Store::wake_ups

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{AsyncConnectionConfig, Client, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot, watch};

use super::connect::CONNECT_TIMEOUT;

/// The listener of one store: started by the first subscription, ended with the store (and
/// the last subscription).
pub(super) struct WakeUps {
    source: Source,
    timeout: Duration,
    requests: OnceLock<mpsc::UnboundedSender<Request>>,
}

/// Where the listener connects.
#[derive(Clone)]
enum Source {
    /// One server, through this client (in RESP3).
    Server(Box<Client>),
    /// A Cluster, through these nodes.
    Cluster(Vec<String>),
}

/// The listener's connection.
enum Connection {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

enum Request {
    /// Subscribe to this channel; the receiver once the subscription is live, or `None`.
    Subscribe(Vec<u8>, oneshot::Sender<Option<watch::Receiver<()>>>),
    /// Every receiver of this subscription (by its number) was dropped.
    Ended(Vec<u8>, u64),
}

/// One channel subscribed: its wake-ups, told to every receiver.
struct Subscribed {
    number: u64,
    wake: Arc<watch::Sender<()>>,
    /// Dropped with the subscription: the task watching for its end lets go of `wake`, so
    /// the receivers err.
    _stop: oneshot::Sender<()>,
}

impl WakeUps {
    /// A listener over connections of `client` (in RESP3, whatever it was configured with);
    /// each subscription bounded by `timeout`.
    pub(super) fn new(client: &Client, timeout: Duration) -> Result<Self, ::redis::RedisError> {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        Ok(Self {
            source: Source::Server(Box::new(Client::open(info.set_redis_settings(settings))?)),
            timeout,
            requests: OnceLock::new(),
        })
    }

    /// A listener over connections to the Cluster of `nodes`, as [`new`](Self::new).
    pub(super) fn cluster(nodes: Vec<String>, timeout: Duration) -> Self {
        Self {
            source: Source::Cluster(nodes),
            timeout,
            requests: OnceLock::new(),
        }
    }

    /// Subscribes to `channel`: the receiver once `SUBSCRIBE` was answered, or `None` if the
    /// server cannot be reached in time.
    pub(super) async fn subscribe(&self, channel: Vec<u8>) -> Option<watch::Receiver<()>> {
        let requests = self.requests.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            let listener = Listener {
                source: self.source.clone(),
                timeout: self.timeout,
                requests: sender.downgrade(),
                connection: None,
                channels: HashMap::new(),
                next: 0,
            };
            tokio::spawn(listener.run(receiver));
            sender
        });
        let (answer, answered) = oneshot::channel();
        requests.send(Request::Subscribe(channel, answer)).ok()?;
        answered.await.ok().flatten()
    }
}

/// The listener's task: subscriptions in the order asked, messages as they come.
struct Listener {
    source: Source,
    timeout: Duration,
    /// To tell it of ended subscriptions (weak: the store's end ends the listener).
    requests: mpsc::WeakUnboundedSender<Request>,
    connection: Option<(Connection, mpsc::UnboundedReceiver<PushInfo>)>,
    channels: HashMap<Vec<u8>, Subscribed>,
    next: u64,
}

impl Listener {
    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        loop {
            let request = match &mut self.connection {
                Some((_, pushes)) => tokio::select! {
                    request = requests.recv() => request,
                    push = pushes.recv() => {
                        self.heard(push);
                        continue;
                    }
                },
                None => requests.recv().await,
            };
            match request {
                Some(Request::Subscribe(channel, answer)) => {
                    let receiver = self.subscribe(channel).await;
                    let _ = answer.send(receiver);
                }
                Some(Request::Ended(channel, number)) => self.ended(channel, number).await,
                None => return,
            }
        }
    }

    /// A message wakes its channel's waiters; a lost connection drops every subscription.
    fn heard(&mut self, push: Option<PushInfo>) {
        match push {
            Some(PushInfo {
                kind: PushKind::Message | PushKind::SMessage,
                data,
            }) => {
                if let Some(Value::BulkString(channel)) = data.first()
                    && let Some(subscribed) = self.channels.get(channel)
                {
                    subscribed.wake.send_replace(());
                }
            }
            Some(PushInfo {
                kind: PushKind::Disconnection,
                ..
            })
            | None => self.lost(),
            Some(_) => {}
        }
    }

    /// Drops the connection and every subscription: their receivers err.
    fn lost(&mut self) {
        if self.connection.take().is_some() {
            tracing::debug!(
                subscriptions = self.channels.len(),
                "the wake-up connection was lost; waiters poll"
            );
        }
        self.channels.clear();
    }

    async fn subscribe(&mut self, channel: Vec<u8>) -> Option<watch::Receiver<()>> {
        if let Some(subscribed) = self.channels.get(&channel) {
            return Some(subscribed.wake.subscribe());
        }
        let (wake, receiver) = watch::channel(());
        if !self.send(&channel, true).await {
            return None;
        }
        let wake = Arc::new(wake);
        let number = self.next;
        self.next += 1;
        let stop = self.watch_end(channel.clone(), number, Arc::clone(&wake));
        self.channels.insert(
            channel,
            Subscribed {
                number,
                wake,
                _stop: stop,
            },
        );
        Some(receiver)
    }

    /// Tells the listener when the last receiver of subscription `number` is dropped, until
    /// the returned sender is.
    fn watch_end(
        &self,
        channel: Vec<u8>,
        number: u64,
        wake: Arc<watch::Sender<()>>,
    ) -> oneshot::Sender<()> {
        let requests = self.requests.clone();
        let (stop, stopped) = oneshot::channel();
        tokio::spawn(async move {
            tokio::select! {
                () = wake.closed() => {
                    if let Some(requests) = requests.upgrade() {
                        let _ = requests.send(Request::Ended(channel, number));
                    }
                }
                _ = stopped => {}
            }
        });
        stop
    }

    async fn ended(&mut self, channel: Vec<u8>, number: u64) {
        let Some(subscribed) = self.channels.get(&channel) else {
            return;
        };
        if subscribed.number != number {
            return;
        }
        if subscribed.wake.receiver_count() > 0 {
            // Waited for again since: watch for its new end.
            let wake = Arc::clone(&subscribed.wake);
            let stop = self.watch_end(channel.clone(), number, wake);
            if let Some(subscribed) = self.channels.get_mut(&channel) {
                subscribed._stop = stop;
            }
            return;
        }
        self.channels.remove(&channel);
        self.send(&channel, false).await;
    }

    /// Subscribes to `channel` (or unsubscribes) on the connection, opened first if need be;
    /// on any failure the connection is dropped, with every subscription.
    async fn send(&mut self, channel: &[u8], subscribe: bool) -> bool {
        let sent = tokio::time::timeout(self.timeout, async {
            if self.connection.is_none() {
                let (pushes, heard) = mpsc::unbounded_channel();
                let connection = match &self.source {
                    Source::Server(client) => {
                        let config = AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(CONNECT_TIMEOUT))
                            .set_push_sender(pushes);
                        let connection = client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await?;
                        Connection::Server(connection)
                    }
                    Source::Cluster(nodes) => {
                        let client = ClusterClientBuilder::new(nodes.clone())
                            .use_protocol(ProtocolVersion::RESP3)
                            .connection_timeout(CONNECT_TIMEOUT)
                            .push_sender(pushes)
                            .build()?;
                        Connection::Cluster(client.get_async_connection().await?)
                    }
                };
                self.connection = Some((connection, heard));
            }
            match &mut self.connection {
                Some((Connection::Server(server), _)) if subscribe => {
                    server.subscribe(channel).await
                }
                Some((Connection::Server(server), _)) => server.unsubscribe(channel).await,
                Some((Connection::Cluster(cluster), _)) if subscribe => {
                    cluster.ssubscribe(channel).await
                }
                Some((Connection::Cluster(cluster), _)) => cluster.sunsubscribe(channel).await,
                None => Ok(()),
            }
        })
        .await;
        match sent {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::debug!(%error, "wake-up subscription failed; waiters poll");
                self.lost();
                false
            }
            Err(_) => {
                tracing::debug!("wake-up subscription timed out; waiters poll");
                self.lost();
                false
            }
        }
    }
}
