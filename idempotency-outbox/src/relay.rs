//! The relay: claims due outbox messages, delivers them, marks them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::table::{Archive, ClaimBatch, Claimed, Notifications, OutboxTable};
use idempotency_core::StoreError;
use idempotency_queue::Backoff;

use crate::metrics::{DEAD, FAILURES, LEASES_LOST, SENT};
use crate::target::{DeliveryError, DestinationError, Target};

/// How often a running relay purges sent messages past their retention.
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// The most sent messages one purge statement deletes.
const PURGE_BATCH: usize = 1_000;
/// The longest pause after a failed round (target unreachable, database failing), whatever the
/// backoff: a relay notices a broker that came back within this.
const MAX_OUTAGE_PAUSE: Duration = Duration::from_secs(30);

/// The shortest delay before a deferred message is due again, whatever the target asked.
const MIN_DEFERRAL: Duration = Duration::from_millis(100);
/// The longest delay before a deferred message is due again, whatever the target asked.
const MAX_DEFERRAL: Duration = Duration::from_secs(3600);

/// How long a message whose destination does not exist is deferred uncounted, by default.
const DESTINATION_GRACE: Duration = Duration::from_secs(60 * 60);
/// The longest delay before a message without a destination is tried again.
const MAX_DESTINATION_RETRY: Duration = Duration::from_secs(30);

/// The shortest pause between two renewals of a delivering batch's lease.
const MIN_RENEWAL: Duration = Duration::from_millis(10);

/// What the relay calls between a batch's delivery and its marks (see
/// [`Relay::with_after_deliver`]).
type AfterDeliver = Arc<dyn Fn(&[Claimed]) + Send + Sync>;

/// What one claim round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Messages claimed.
    pub claimed: usize,
    /// Delivered and marked sent.
    pub sent: usize,
    /// Refused by the target, due again after a backoff.
    pub refused: usize,
    /// Refused for the last allowed time: now dead.
    pub dead: usize,
    /// Given back because the target could not be reached.
    pub unreachable: usize,
    /// Given back uncounted: the target asked to try later, or the message's destination does
    /// not exist yet (within the relay's destination grace).
    pub deferred: usize,
}

impl std::ops::AddAssign for Round {
    /// Adds `other`'s counts: the totals of several rounds.
    fn add_assign(&mut self, other: Self) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.refused += other.refused;
        self.dead += other.dead;
        self.unreachable += other.unreachable;
        self.deferred += other.deferred;
    }
}

/// Delivers committed outbox messages to a [`Target`] at least once, then marks them sent.
///
/// Run as many relays on one outbox as you like: each claims its own batches (disjoint, by the
/// claim's lease), so none delivers a message another holds. While the target delivers a batch,
/// the relay renews the batch's lease (every third of it), so a delivery slower than the lease
/// keeps its batch. A relay that dies after delivering and before marking leaves its batch
/// claimed until the lease ends; then a relay delivers it again, with the same message ids, for
/// the receiver to drop as duplicates.
///
/// ```no_run
/// # #[cfg(all(feature = "postgres", feature = "rabbitmq"))]
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), idempotency_core::StoreError> {
/// use idempotency_outbox::Outbox;
/// use idempotency_outbox::{Relay, rabbitmq::RabbitMqTarget};
///
/// let outbox = Outbox::postgres(pool);
/// outbox.migrate().await?;
/// let target = RabbitMqTarget::new("amqp://guest:guest@127.0.0.1:5672/%2f", "");
/// Relay::new(outbox, target).run().await;
/// # Ok(()) }
/// # #[cfg(not(all(feature = "postgres", feature = "rabbitmq")))]
/// # async fn demo() {}
/// ```
pub struct Relay<O, T> {
    outbox: O,
    target: T,
    batch_size: usize,
    lease: Duration,
    max_attempts: u32,
    backoff: Backoff,
    poll_interval: Duration,
    listen_bound: Duration,
    retention: Duration,
    destination_grace: Duration,
    archive: tokio::sync::Mutex<Archive>,
    after_deliver: Option<AfterDeliver>,
}

impl<O: OutboxTable, T: Target> Relay<O, T> {
    /// A relay from `outbox` to `target`: batches of 100, a 30 s lease, dead after 10 refusals,
    /// retries 1 s doubling to 5 min, polling every 500 ms where it cannot `LISTEN`, sent
    /// messages kept 24 h, messages without a destination deferred uncounted for their first
    /// hour.
    pub fn new(outbox: O, target: T) -> Self {
        Self {
            outbox,
            target,
            batch_size: 100,
            lease: Duration::from_secs(30),
            max_attempts: 10,
            backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(300)),
            poll_interval: Duration::from_millis(500),
            listen_bound: Duration::from_secs(30),
            retention: Duration::from_secs(24 * 60 * 60),
            destination_grace: DESTINATION_GRACE,
            archive: tokio::sync::Mutex::new(Archive::None),
            after_deliver: None,
        }
    }

    /// At most `size` messages per claim (at least 1).
    pub fn with_batch_size(mut self, size: usize) -> Self {
        self.batch_size = size.max(1);
        self
    }

    /// How long a claimed batch stays this relay's without a renewal: while the target delivers,
    /// the relay renews it every third of it, so it bounds how long the batch of a relay that
    /// died waits for another relay, not how long a delivery may take. A renewal that finds the
    /// claim lost (the database unreachable for longer than the lease) is logged as a warning:
    /// another relay may then deliver those messages too.
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// A message refused this many times is dead (at least 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The delay before a refused message is due again (by its failures), and before the relay
    /// tries an unreachable target or a failing database again (by consecutive failures, at
    /// most 30 s).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How often to look for due messages without `LISTEN` (MySQL, SQLite, or a PostgreSQL
    /// listener that failed), and while due messages are held back (ordering, other relays).
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long sent messages are kept before a running relay purges them.
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long after its enqueue a message whose destination does not exist
    /// ([`DeliveryError::NoDestination`]: no queue bound, no stream for the subject, HTTP 404)
    /// is given back uncounted (default 1 h): the receiver that declares the destination may
    /// start after the relay. Such a message is tried again after a tenth of its age, between
    /// the backoff's first step and 30 s, with a warning per round; past the grace each refusal
    /// counts toward dead like any other. Zero counts them at once.
    pub fn with_destination_grace(mut self, grace: Duration) -> Self {
        self.destination_grace = grace;
        self
    }

    /// Copies sent messages to `archive` before purging them (default [`Archive::None`]: deleted
    /// without a copy): [`Archive::Table`] names a table in the outbox's database, created on
    /// first use, filled in the delete's transaction; [`Archive::JsonLines`] receives one
    /// [`ArchivedMessage`](crate::table::ArchivedMessage) per line, flushed
    /// before the delete commits. Payloads may be personal data: the archive's retention is
    /// yours to decide.
    pub fn with_archive(mut self, archive: Archive) -> Self {
        self.archive = tokio::sync::Mutex::new(archive);
        self
    }

    /// Calls `hook` after each batch was delivered and before it is marked sent: the window
    /// in which a crash makes at-least-once delivery deliver twice. For fault injection (a test
    /// kills the process there) and tracing; keep it quick.
    pub fn with_after_deliver(mut self, hook: impl Fn(&[Claimed]) + Send + Sync + 'static) -> Self {
        self.after_deliver = Some(Arc::new(hook));
        self
    }

    /// The outbox it relays from.
    pub fn outbox(&self) -> &O {
        &self.outbox
    }

    /// Prepares the target's destinations ([`Target::prepare`]: declares them, or checks that
    /// they exist), then [`run`](Self::run)s: a relay told to require its destinations refuses
    /// to start without them, with an error naming what is missing.
    pub async fn try_run(&self) -> Result<Infallible, DestinationError> {
        self.target.prepare().await?;
        self.run().await;
        unreachable!("Relay::run never returns")
    }

    /// Delivers due messages until it is dropped: woken by enqueues on PostgreSQL, polling
    /// elsewhere; backs off while the target or the database fails; purges sent messages past
    /// their retention.
    pub async fn run(&self) {
        let mut notifications = match self.outbox.listen().await {
            Ok(notifications) => notifications,
            Err(error) => {
                tracing::warn!(%error, table = self.outbox.table_name(), "outbox LISTEN unavailable; polling");
                Notifications::none()
            }
        };
        let mut failures = 0u64;
        let mut purged_at: Option<Instant> = None;
        loop {
            match self.deliver_due().await {
                Ok(round) if round.unreachable > 0 => {
                    failures += 1;
                    tokio::time::sleep(self.outage_pause(failures)).await;
                    continue;
                }
                // Sending may have unblocked the next message of an aggregate: claim again.
                Ok(round) if round.claimed > 0 => {
                    failures = 0;
                    continue;
                }
                Ok(_) => failures = 0,
                Err(error) => {
                    failures += 1;
                    tracing::warn!(%error, table = self.outbox.table_name(), "outbox claim failed");
                    tokio::time::sleep(self.outage_pause(failures)).await;
                    continue;
                }
            }
            if purged_at.is_none_or(|at| at.elapsed() >= PURGE_EVERY) {
                match self.purge().await {
                    Ok(purged) => tracing::debug!(
                        purged,
                        table = self.outbox.table_name(),
                        "purged sent outbox messages"
                    ),
                    Err(error) => {
                        tracing::warn!(%error, table = self.outbox.table_name(), "purging the outbox failed");
                    }
                }
                purged_at = Some(Instant::now());
            }
            notifications.wait(self.idle(&notifications).await).await;
        }
    }

    /// The pause after `failures` failed rounds in a row: the backoff, at most 30 s.
    fn outage_pause(&self, failures: u64) -> Duration {
        self.backoff.delay(failures).min(MAX_OUTAGE_PAUSE)
    }

    /// How long to wait for an enqueue before claiming again: until the next message is due,
    /// bounded; the poll interval if a due message could not be claimed.
    async fn idle(&self, notifications: &Notifications) -> Duration {
        let bound = if notifications.listens() {
            self.listen_bound
        } else {
            self.poll_interval
        };
        match self.outbox.next_due().await {
            Ok(Some(due)) if due.is_zero() => self.poll_interval,
            Ok(Some(due)) => due.min(bound),
            Ok(None) => bound,
            Err(error) => {
                tracing::warn!(%error, table = self.outbox.table_name(), "outbox next due failed");
                self.poll_interval
            }
        }
    }

    /// Deletes sent messages past the retention, in bounded batches, archiving them first if
    /// asked to ([`with_archive`](Self::with_archive)); how many. A running relay does this every
    /// minute; for tools and tests.
    pub async fn purge(&self) -> Result<u64, StoreError> {
        let mut archive = self.archive.lock().await;
        let mut total = 0;
        loop {
            let purged = self
                .outbox
                .purge_sent(self.retention, PURGE_BATCH, &mut archive)
                .await?;
            total += purged;
            if purged < PURGE_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// Claims one batch of due messages, delivers it and marks every message: sent, refused
    /// (due again after a backoff, or dead), or given back uncounted (target unreachable, or
    /// deferred by the target until it asked).
    pub async fn deliver_due(&self) -> Result<Round, StoreError> {
        let claim = fresh_claim_token()?;
        let batch = self
            .outbox
            .claim(ClaimBatch {
                limit: self.batch_size,
                lease: self.lease,
                claim,
            })
            .await?;
        let mut round = Round {
            claimed: batch.len(),
            ..Round::default()
        };
        if batch.is_empty() {
            return Ok(round);
        }
        let seqs: Vec<i64> = batch.iter().map(|claimed| claimed.seq).collect();
        let mut results = tokio::select! {
            biased;
            results = self.target.deliver(&batch) => results,
            never = self.keep_leased(claim, &seqs) => match never {},
        };
        results.resize_with(batch.len(), || {
            Err(DeliveryError::Unreachable(
                "the target answered for fewer messages".to_owned(),
            ))
        });
        if let Some(hook) = &self.after_deliver {
            hook(&batch);
        }
        let table = self.outbox.table_name().to_owned();
        let (mut sent, mut given_back) = (Vec::new(), Vec::new());
        let mut without_destination: Option<(&str, String)> = None;
        let mut undestined = 0usize;
        for (claimed, result) in batch.iter().zip(results) {
            let result = match result {
                Err(DeliveryError::NoDestination(reason))
                    if claimed.age < self.destination_grace =>
                {
                    let retry_in = (claimed.age / 10)
                        .max(self.backoff.delay(1))
                        .min(MAX_DESTINATION_RETRY);
                    self.outbox.release(claim, &[claimed.seq], retry_in).await?;
                    round.deferred += 1;
                    metrics::counter!(FAILURES, "table" => table.clone(), "reason" => "no_destination")
                        .increment(1);
                    undestined += 1;
                    without_destination.get_or_insert((&claimed.message.topic, reason));
                    continue;
                }
                Err(DeliveryError::NoDestination(reason)) => Err(DeliveryError::Refused(format!(
                    "no destination for {:?} after the grace: {reason}",
                    self.destination_grace
                ))),
                other => other,
            };
            match result {
                Ok(()) => sent.push(claimed.seq),
                Err(DeliveryError::Unreachable(reason)) => {
                    tracing::debug!(id = %claimed.message.id, %reason, "outbox target unreachable");
                    given_back.push(claimed.seq);
                }
                Err(DeliveryError::Deferred {
                    reason,
                    retry_after,
                }) => {
                    let retry_in = retry_after
                        .unwrap_or_else(|| self.backoff.delay(1))
                        .clamp(MIN_DEFERRAL, MAX_DEFERRAL);
                    tracing::debug!(id = %claimed.message.id, %reason, ?retry_in, "outbox target deferred the message");
                    self.outbox.release(claim, &[claimed.seq], retry_in).await?;
                    round.deferred += 1;
                    metrics::counter!(FAILURES, "table" => table.clone(), "reason" => "deferred")
                        .increment(1);
                }
                Err(DeliveryError::Refused(reason) | DeliveryError::NoDestination(reason)) => {
                    let attempt = claimed.attempts.saturating_add(1);
                    let dead = attempt >= self.max_attempts;
                    let retry_in = self.backoff.delay(u64::from(attempt));
                    self.outbox
                        .mark_failed(claim, claimed.seq, &reason, retry_in, dead)
                        .await?;
                    metrics::counter!(FAILURES, "table" => table.clone(), "reason" => "refused")
                        .increment(1);
                    if dead {
                        round.dead += 1;
                        metrics::counter!(DEAD, "table" => table.clone()).increment(1);
                        tracing::warn!(id = %claimed.message.id, topic = %claimed.message.topic, attempts = attempt, %reason, "outbox message dead");
                    } else {
                        round.refused += 1;
                    }
                }
            }
        }
        if let Some((topic, reason)) = without_destination {
            tracing::warn!(
                table = %table,
                topic,
                %reason,
                messages = undestined,
                grace = ?self.destination_grace,
                "outbox messages have no destination yet (is the receiver declared?); deferred uncounted"
            );
        }
        if !sent.is_empty() {
            let marked = self.outbox.mark_sent(claim, &sent).await?;
            round.sent = usize::try_from(marked).unwrap_or(usize::MAX);
            metrics::counter!(SENT, "table" => table.clone()).increment(marked);
        }
        if !given_back.is_empty() {
            self.outbox
                .release(claim, &given_back, Duration::ZERO)
                .await?;
            round.unreachable = given_back.len();
            metrics::counter!(FAILURES, "table" => table, "reason" => "unreachable")
                .increment(given_back.len() as u64);
        }
        Ok(round)
    }

    /// Renews the lease of claim `claim` on `seqs` every third of the lease, until dropped (when
    /// the delivery it runs beside is done); warns when messages were lost to another relay.
    async fn keep_leased(&self, claim: i64, seqs: &[i64]) -> Infallible {
        let every = (self.lease / 3).max(MIN_RENEWAL);
        let mut held = seqs.len() as u64;
        loop {
            tokio::time::sleep(every).await;
            match self.outbox.extend(claim, seqs, self.lease).await {
                Ok(renewed) if renewed < held => {
                    tracing::warn!(
                        table = self.outbox.table_name(),
                        lost = held - renewed,
                        held = renewed,
                        "outbox lease lost while delivering: another relay may deliver these messages too"
                    );
                    metrics::counter!(LEASES_LOST, "table" => self.outbox.table_name().to_owned())
                        .increment(held - renewed);
                    held = renewed;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, table = self.outbox.table_name(), "renewing the outbox lease failed");
                }
            }
        }
    }

    /// Delivers rounds until one claims nothing; the rounds' totals. For tests, tools and
    /// benchmarks (a running relay uses [`run`](Self::run)).
    pub async fn drain(&self) -> Result<Round, StoreError> {
        let mut total = Round::default();
        loop {
            let round = self.deliver_due().await?;
            if round.claimed == 0 {
                return Ok(total);
            }
            total += round;
            if round.unreachable > 0 {
                return Ok(total);
            }
        }
    }
}

/// A claim token no other batch uses (random, 63 bits).
fn fresh_claim_token() -> Result<i64, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|error| StoreError::Backend(error.to_string().into()))?;
    Ok(i64::from_le_bytes(bytes) & i64::MAX)
}
