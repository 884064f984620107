//! The command line: global options and one subcommand per operation.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use idempotency_operations::Actor;

use crate::duration::parse_duration;

/// Find and resolve dangling idempotency records, reconcile, purge with archive.
///
/// Exit codes: 0 done, 2 usage (or a destructive action not confirmed), 3 refused by the
/// fence (the record moved on or is not in progress), 4 store unreachable, 5 not found (no
/// record for the key, no such message, no record table to scan, or no key under the Redis
/// prefix), 6 ambiguous (a shortened id, or a raw key, that fits several records: each one's
/// id is printed, pass one with --key-hash), 1 any other failure.
///
/// Every listing prints each record's id (KEY_HASH, `key_hash` in JSON): --key-hash takes it
/// whole or any unique prefix of at least 8 characters.
///
/// Where the records are comes from the environment as well as the flags:
/// IDEMPOTENCY_STORE_URL, IDEMPOTENCY_TABLE, IDEMPOTENCY_PREFIX, IDEMPOTENCY_AUDIT_TABLE,
/// IDEMPOTENCY_OUTBOX_TABLE, IDEMPOTENCY_TRUTH_URL and IDEMPOTENCY_TRUTH_TABLE; who acts from
/// IDEMPOTENCY_ACTOR (else $USER).
#[derive(Debug, Parser)]
#[command(name = "idempotency", version)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every subcommand takes.
#[derive(Clone, Debug, Args)]
pub(crate) struct Global {
    /// The store: redis://host:6379, a Redis Cluster as a comma-separated node list
    /// (redis://a:7001,redis://b:7002), postgres://…, mysql://…, sqlite://path. Read from
    /// IDEMPOTENCY_STORE_URL if not given, so that passwords stay out of argv.
    #[arg(
        long,
        env = "IDEMPOTENCY_STORE_URL",
        hide_env_values = true,
        global = true
    )]
    pub(crate) store: Option<String>,
    /// The record table of a SQL store (default idempotency_records). A scan of a table that
    /// does not exist or holds no idempotency records is refused (exit 5).
    #[arg(long, env = "IDEMPOTENCY_TABLE", global = true)]
    pub(crate) table: Option<String>,
    /// The key prefix of a Redis store. A scan that finds no key under it is refused (exit 5).
    #[arg(
        long,
        env = "IDEMPOTENCY_PREFIX",
        default_value = "idempotency:",
        global = true
    )]
    pub(crate) prefix: String,
    /// The outbox table of a SQL store, for `outbox` (default idempotency_outbox). A table
    /// that does not exist or is not an outbox table is refused (exit 5).
    #[arg(long, env = "IDEMPOTENCY_OUTBOX_TABLE", global = true)]
    pub(crate) outbox_table: Option<String>,
    /// The SQL audit table of operator actions (created if missing): by default the record
    /// table's name with `_audit` appended (idempotency_audit for idempotency_records), so
    /// services sharing a database with their own record tables never share an audit table.
    /// Redis stores audit to the log stream (stderr).
    #[arg(long, env = "IDEMPOTENCY_AUDIT_TABLE", global = true)]
    pub(crate) audit_table: Option<String>,
    /// The namespace (an endpoint, a consumer: `payments.callback`).
    #[arg(long, global = true)]
    pub(crate) namespace: Option<String>,
    /// One JSON object per line, for scripts; a table for people otherwise.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Records examined per round trip.
    #[arg(long, default_value_t = 500, global = true)]
    pub(crate) batch: usize,
}

/// How a raw key becomes the storage key the service derived: its scope (namespace, principal)
/// and mechanism.
#[derive(Debug, Args)]
pub(crate) struct KeyArgs {
    /// The raw key, as the client sent it (an Idempotency-Key, a trade number).
    #[arg(long, required_unless_present = "key_hash")]
    pub(crate) key: Option<String>,
    /// The record's id as listed (KEY_HASH: 64 hex characters, or a unique prefix of at least
    /// 8), instead of the raw key.
    #[arg(long, conflicts_with = "key")]
    pub(crate) key_hash: Option<String>,
    /// The principal (tenant, user) the service scoped the key with, if it extracts one.
    #[arg(long)]
    pub(crate) principal: Option<String>,
    /// Only the record of this front end: http (or grpc, request: the HTTP and gRPC layers),
    /// function (`#[idempotent]`), transaction (claims by hand in a transaction), consumer
    /// (or message). Without it, every front end's record of the key is looked for; a key
    /// with records of several lists their ids (exit 6) for --key-hash.
    #[arg(long)]
    pub(crate) mechanism: Option<String>,
}

/// Who acts and why, for the audit; and the confirmation.
#[derive(Debug, Args)]
pub(crate) struct ActionArgs {
    /// Who acts, for the audit (default: $USER).
    #[arg(long, env = "IDEMPOTENCY_ACTOR")]
    pub(crate) actor: Option<String>,
    /// Why (a ticket, an incident).
    #[arg(long, default_value = "")]
    pub(crate) reason: String,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub(crate) yes: bool,
}

impl ActionArgs {
    /// Who acts (`--actor`, IDEMPOTENCY_ACTOR, else $USER) and why.
    pub(crate) fn actor(&self) -> Actor {
        let who = self
            .actor
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".to_owned());
        Actor::new(who, self.reason.clone())
    }
}

/// What an action on one record takes (`release`, `complete`, `delete`): the record, the
/// fence it must still fit, and who acts.
#[derive(Debug, Args)]
pub(crate) struct RecordAction {
    #[command(flatten)]
    pub(crate) key: KeyArgs,
    #[command(flatten)]
    pub(crate) fence: FenceArgs,
    #[command(flatten)]
    pub(crate) action: ActionArgs,
}

/// The fence of an action: the record as listed (its token, and when it was last written).
/// Without them, the record as read just before acting.
#[derive(Debug, Args)]
pub(crate) struct FenceArgs {
    /// The fencing token the record was listed with.
    #[arg(long)]
    pub(crate) token: Option<u64>,
    /// When the record had been last written, as listed (updated_at_ms).
    #[arg(long, requires = "token")]
    pub(crate) updated_at_ms: Option<u64>,
}

/// Where a business key went: `--store` is the sender's database (its record and its outbox,
/// `--outbox-table`), `--receiver-store` the receiver's. Exit 0 when the receiver has a record of the message,
/// 5 (not found) when the trail stops before it (each hop is printed either way).
#[cfg(feature = "sql")]
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// The business key, as the sender enqueued it (a trade number).
    #[arg(long)]
    pub(crate) key: String,
    /// The principal the sender scoped its record with, if any (with --namespace).
    #[arg(long)]
    pub(crate) principal: Option<String>,
    /// The front end that wrote the sender's record: http (or grpc), function, transaction,
    /// consumer.
    #[arg(long, default_value = "http")]
    pub(crate) mechanism: String,
    /// The namespace of the message's scope, as the sender built it
    /// (`OutboxMessage::new(&Scope::new("coupon.grant"), …)`): the message id derives from it.
    #[arg(long)]
    pub(crate) message_namespace: String,
    /// The receiver's store. Read from IDEMPOTENCY_RECEIVER_STORE_URL if not given.
    #[arg(long, env = "IDEMPOTENCY_RECEIVER_STORE_URL", hide_env_values = true)]
    pub(crate) receiver_store: String,
    /// The receiver's record table (SQL stores).
    #[arg(long)]
    pub(crate) receiver_table: Option<String>,
    /// The namespace the receiver's consumer claims messages in.
    #[arg(long)]
    pub(crate) receiver_namespace: String,
    /// The principal the receiver scoped its record with, if any.
    #[arg(long)]
    pub(crate) receiver_principal: Option<String>,
    /// The front end of the receiver's record: consumer for a queue consumer, http for an
    /// HTTP receiver.
    #[arg(long, default_value = "consumer")]
    pub(crate) receiver_mechanism: String,
}

/// The outbox's operations.
#[derive(Debug, Subcommand)]
pub(crate) enum OutboxCommand {
    /// Messages per state: pending (claimed ones included), sent (not purged yet), dead.
    Stats,
    /// Dead messages (refused too often), oldest first: id, topic, business key, attempts,
    /// last error.
    Dead {
        /// At most this many messages.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Also show each payload, base64 (it may hold personal data).
        #[arg(long)]
        payload: bool,
    },
    /// Makes dead messages pending again, due now, their attempts reset: the relay delivers
    /// them again. Each revival is audited in the record actions' audit table. Exit 3 if one
    /// of them was not dead (or is unknown).
    Revive {
        /// A dead message's id (repeat for several).
        #[arg(long = "id", required = true)]
        ids: Vec<String>,
        #[command(flatten)]
        action: ActionArgs,
    },
}

/// The operations.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// The transactional outbox (a SQL store's outbox table): counts, dead messages, revive.
    Outbox {
        #[command(subcommand)]
        command: OutboxCommand,
    },
    /// Records in progress whose lease ended (abandoned: no live owner), listed as soon as it
    /// ended; with --older-than, also in progress and last written longer ago than that.
    /// With --truth, one view of a two-tier consumer: --store is its fast tier, --truth its
    /// SQL truth; a fast-tier record whose key the truth holds completed is left out (the
    /// truth settled it; the claim only waits to expire), and the TIER column says where
    /// each record is.
    Stuck {
        /// Also in-progress records last written longer ago than this (0s: every one).
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
        /// At most this many records.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// The SQL truth of a two-tier consumer whose fast tier --store is (postgres://,
        /// mysql://, sqlite://).
        #[arg(long, env = "IDEMPOTENCY_TRUTH_URL", hide_env_values = true)]
        truth: Option<String>,
        /// The truth's record table (default: --table, else idempotency_records).
        #[arg(long, env = "IDEMPOTENCY_TRUTH_TABLE", requires = "truth")]
        truth_table: Option<String>,
    },
    /// Records that met a conflicting duplicate (the key again with another payload: another
    /// amount for the same trade), with how many and when the last came: what to reconcile.
    Conflicts {
        /// Only records whose last conflict came within this long.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// At most this many records.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// One record, by its id (--key-hash) or its namespace (and principal) and raw key.
    #[command(visible_alias = "show")]
    Inspect {
        #[command(flatten)]
        key: KeyArgs,
        /// Also show the stored body (it may hold personal data) and fingerprint.
        #[arg(long)]
        body: bool,
    },
    /// Releases a stuck key, so that the next retry runs the work.
    Release {
        #[command(flatten)]
        on: RecordAction,
    },
    /// Completes an in-progress key by hand: duplicates then get this outcome. For a run with
    /// steps, this abandons it with that answer (`abandon`).
    #[command(visible_alias = "abandon")]
    Complete {
        #[command(flatten)]
        on: RecordAction,
        /// The outcome's status (HTTP status; 0 for functions).
        #[arg(long)]
        status: u16,
        /// The outcome's body.
        #[arg(long, default_value = "")]
        body: String,
        /// How the body is stored: http (a response the HTTP layer replays, JSON if it
        /// parses) or raw (the bytes as given: functions, consumers).
        #[arg(long, default_value = "http")]
        encoding: String,
        /// How long the outcome is kept.
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        ttl: Duration,
    },
    /// Deletes one record, in any state: a completed key then runs again.
    Delete {
        #[command(flatten)]
        on: RecordAction,
    },
    /// Resumes an in-progress run with steps now: its lease ends and its attempts count from 1,
    /// so the next retry or the completer takes it over after its last checkpoint.
    Resume {
        #[command(flatten)]
        on: RecordAction,
    },
    /// Deletes expired records (completed past their TTL, abandoned past the grace) in
    /// batches, copying them first to an archive if asked (bodies may be personal data).
    /// A SQL table configured with a TTL (`SqlStore::with_table_ttl`) keeps every record
    /// last written less than that long ago, whatever --grace says: the purge prints that
    /// floor and keeps to it.
    Purge {
        #[command(flatten)]
        action: ActionArgs,
        /// Copy each purged record to this table in the same database (SQL).
        #[arg(long, conflicts_with = "archive_file")]
        archive_table: Option<String>,
        /// Append each purged record to this file, one JSON object per line.
        #[arg(long)]
        archive_file: Option<PathBuf>,
        /// Resume a stopped purge at the cursor it reported.
        #[arg(long)]
        resume: Option<String>,
        /// How long after its lease ended an abandoned record is kept (the services' setting).
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        grace: Duration,
    },
    /// Records per state (in progress, abandoned, completed) and the oldest abandoned age.
    Stats {
        /// Only records last written within this long.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// Only records last written longer ago than this.
        #[arg(long, value_parser = parse_duration)]
        older_than: Option<Duration>,
    },
    /// One business key across services: the sender's record (with --namespace), its outbox
    /// message and the receiver's record, each found by deriving its key (also after the
    /// outbox row was purged). Exit 5 when the receiver has no record.
    #[cfg(feature = "sql")]
    Trace(TraceArgs),
    /// Each given key's state, attempts and outcome status (absent: no record), in order.
    Reconcile {
        /// A raw key (repeat for several).
        #[arg(long = "key")]
        keys: Vec<String>,
        /// A record's id as listed, whole or a unique prefix of at least 8 (repeat for
        /// several), instead of raw keys.
        #[arg(long = "key-hash", conflicts_with_all = ["keys", "keys_file"])]
        ids: Vec<String>,
        /// A file of raw keys, one per line (- for stdin).
        #[arg(long)]
        keys_file: Option<PathBuf>,
        /// The principal the keys were scoped with.
        #[arg(long)]
        principal: Option<String>,
        /// The front end that wrote the records (see inspect); without it, every front end's
        /// record of each key is looked for.
        #[arg(long)]
        mechanism: Option<String>,
    },
}
