//! `outbox stats|dead|revive`: what an operator sees of the transactional outbox, and the
//! revival of dead messages.

use base64::Engine;
use idempotency_core::StoreError;
use idempotency_operations::{Action, AuditEntry, AuditLog};
use idempotency_outbox::Outbox;
use idempotency_outbox::table::{DeadMessage, OutboxTable};
use idempotency_sql::Dialect;
use serde::Serialize;

use crate::args::{Global, OutboxCommand};
use crate::failure::Failure;
use crate::output::{Output, age};
use crate::sql_stores::{OutboxStore, connect_outbox, sql_audit};
use crate::terminal::confirm;

/// Runs an `outbox` subcommand on the outbox table of `--store`.
pub(crate) async fn run(
    global: &Global,
    command: OutboxCommand,
    out: &mut Output,
) -> Result<(), Failure> {
    match connect_outbox(global).await? {
        #[cfg(feature = "postgres")]
        OutboxStore::Postgres(outbox) => on(&outbox, global, command, out).await,
        #[cfg(feature = "mysql")]
        OutboxStore::MySql(outbox) => on(&outbox, global, command, out).await,
        #[cfg(feature = "sqlite")]
        OutboxStore::Sqlite(outbox) => on(&outbox, global, command, out).await,
    }
}

/// What `stats` prints.
#[derive(Serialize)]
struct Stats<'a> {
    table: &'a str,
    pending: u64,
    claimed: u64,
    due: u64,
    sent: u64,
    dead: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_pending_ms: Option<u64>,
}

/// A dead message as `dead` prints it: never its payload unless asked.
#[derive(Serialize)]
struct Dead<'a> {
    seq: i64,
    id: &'a str,
    topic: &'a str,
    business_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregate: Option<&'a str>,
    attempts: u32,
    last_error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
}

impl<'a> Dead<'a> {
    fn of(dead: &'a DeadMessage, payload: bool) -> Self {
        Self {
            seq: dead.seq,
            id: &dead.message.id,
            topic: &dead.message.topic,
            business_key: &dead.message.key,
            aggregate: dead.message.aggregate.as_deref(),
            attempts: dead.attempts,
            last_error: dead.last_error.as_deref(),
            payload_base64: payload
                .then(|| base64::engine::general_purpose::STANDARD.encode(&dead.message.payload)),
        }
    }
}

/// What `revive` prints per message.
#[derive(Serialize)]
struct Revived<'a> {
    id: &'a str,
    revived: bool,
}

async fn on<D: Dialect>(
    outbox: &Outbox<D>,
    global: &Global,
    command: OutboxCommand,
    out: &mut Output,
) -> Result<(), Failure>
where
    Outbox<D>: OutboxTable,
{
    let table = outbox.table_name();
    // Counting first tells a table that is no outbox from an empty outbox, for every command.
    let counts = outbox.counts().await.map_err(|error| match error {
        StoreError::Backend(detail) => Failure::NotFound(format!(
            "{table} is not an outbox table here (it does not exist, or lacks the outbox \
             columns; the services' table: --outbox-table or IDEMPOTENCY_OUTBOX_TABLE): {detail}"
        )),
        other => Failure::from(other),
    })?;
    match command {
        OutboxCommand::Stats => {
            let oldest_pending_ms = counts
                .oldest_pending
                .map(|oldest| u64::try_from(oldest.as_millis()).unwrap_or(u64::MAX));
            if out.json() {
                return out.line(&Stats {
                    table,
                    pending: counts.pending,
                    claimed: counts.claimed,
                    due: counts.due,
                    sent: counts.sent,
                    dead: counts.dead,
                    oldest_pending_ms,
                });
            }
            let waiting = counts.pending - counts.claimed.min(counts.pending);
            let backing_off = waiting - counts.due.min(waiting);
            out.text(&format!("table      {table}"))?;
            out.text(&format!(
                "pending    {}{}",
                counts.pending,
                oldest_pending_ms
                    .map(|oldest| format!(" (oldest {})", age(oldest)))
                    .unwrap_or_default()
            ))?;
            out.text(&format!(
                "  claimed  {} (a relay delivers them)",
                counts.claimed
            ))?;
            out.text(&format!("  due      {} (no relay holds them)", counts.due))?;
            out.text(&format!(
                "  backoff  {backing_off} (due after a failed attempt's backoff)"
            ))?;
            out.text(&format!("sent       {}", counts.sent))?;
            out.text(&format!("dead       {}", counts.dead))
        }
        OutboxCommand::Dead { limit, payload } => {
            let dead = outbox.dead(limit).await?;
            let views: Vec<Dead<'_>> = dead.iter().map(|dead| Dead::of(dead, payload)).collect();
            if out.json() {
                return views.iter().try_for_each(|view| out.line(view));
            }
            let key_width = views
                .iter()
                .map(|view| view.business_key.len())
                .max()
                .unwrap_or(0)
                .max("BUSINESS_KEY".len());
            out.text(&format!(
                "{:<64}  {:<24}  {:<key_width$}  {:>8}  LAST_ERROR",
                "ID", "TOPIC", "BUSINESS_KEY", "ATTEMPTS"
            ))?;
            for view in &views {
                out.text(&format!(
                    "{:<64}  {:<24}  {:<key_width$}  {:>8}  {}",
                    view.id,
                    view.topic,
                    view.business_key,
                    view.attempts,
                    view.last_error.unwrap_or("")
                ))?;
            }
            out.text(&format!("{} dead message(s)", views.len()))
        }
        OutboxCommand::Revive { ids, action } => {
            let question = format!("revive {} dead message(s) of {table}", ids.len());
            confirm(&question, action.yes)?;
            let actor = action.actor();
            let audit = sql_audit(outbox.pool().clone(), global).await?;
            let mut not_dead = Vec::new();
            for id in &ids {
                let revived = outbox.revive(id).await?;
                let detail = format!(
                    "outbox {table} message {id}: {}",
                    if revived { "revived" } else { "not dead" }
                );
                let entry = AuditEntry::new(&actor, Action::Revive, revived, detail);
                audit.write(&entry).await.map_err(|error| {
                    Failure::Other(format!(
                        "{id} {}, but its audit entry could not be written to {}: {error}",
                        if revived { "revived" } else { "not revived" },
                        audit.table_name()
                    ))
                })?;
                if out.json() {
                    out.line(&Revived { id, revived })?;
                } else {
                    let done = if revived { "revived" } else { "not dead" };
                    out.text(&format!("{id}  {done}"))?;
                }
                if !revived {
                    not_dead.push(id.as_str());
                }
            }
            if not_dead.is_empty() {
                Ok(())
            } else {
                Err(Failure::Refused(format!(
                    "not dead (unknown, pending or sent), left as they are: {}",
                    not_dead.join(", ")
                )))
            }
        }
    }
}
