//! `trace`: one business key across services, from the sender's record through the outbox
//! message to the receiver's record, by deriving each hop's key (nothing is looked up, so the
//! trace works after the outbox row was purged).

use std::time::SystemTime;

use idempotency_core::{DEFAULT_ABANDONED_GRACE, IdempotencyKey, Mechanism, Scope};
use idempotency_operations::{Admin, RecordView};
use idempotency_outbox::table::{MessageStatus, message_id};
use serde::Serialize;

use crate::args::{Global, TraceArgs};
use crate::connect::connect;
use crate::failure::Failure;
use crate::output::Output;
use crate::sql_stores::{OutboxStore, connect_outbox};
use crate::store::Audited;

/// One hop of the trail.
#[derive(Serialize)]
struct Hop {
    /// sender, outbox or receiver.
    hop: &'static str,
    /// The derived key this hop is found by: a storage key, or the message id.
    key: String,
    /// What is there: a record's state, a message's state, or absent / purged.
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

/// Follows `args.key` from the sender's record (when `--namespace` names its scope) through
/// its outbox message to the receiver's record.
pub(crate) async fn trace(
    global: &Global,
    args: &TraceArgs,
    out: &mut Output,
) -> Result<(), Failure> {
    let key = IdempotencyKey::parse(&args.key)
        .map_err(|error| Failure::Usage(format!("--key {:?}: {error}", args.key)))?;
    let id = message_id(&Scope::new(args.message_namespace.as_str()), &key);
    let mut hops = Vec::with_capacity(3);
    if let Some(namespace) = &global.namespace {
        let scope = scoped(namespace, args.principal.as_deref());
        let mechanism = mechanism_of(&args.mechanism)?;
        let admin = connect(global, Audited::No, DEFAULT_ABANDONED_GRACE)
            .await?
            .admin;
        let storage_key = Admin::storage_key(&scope, mechanism, key.as_str());
        hops.push(record_hop("sender", &admin, storage_key).await?);
    }
    hops.push(outbox_hop(global, &id).await?);
    let receiver = Global {
        store: Some(args.receiver_store.clone()),
        table: args.receiver_table.clone(),
        namespace: Some(args.receiver_namespace.clone()),
        ..global.clone()
    };
    let scope = scoped(&args.receiver_namespace, args.receiver_principal.as_deref());
    let mechanism = mechanism_of(&args.receiver_mechanism)?;
    let admin = connect(&receiver, Audited::No, DEFAULT_ABANDONED_GRACE)
        .await?
        .admin;
    let received = record_hop(
        "receiver",
        &admin,
        Admin::storage_key(&scope, mechanism, &id),
    )
    .await?;
    let reached = received.state != "absent";
    hops.push(received);
    for hop in &hops {
        if out.json() {
            out.line(hop)?;
        } else {
            out.text(&format!(
                "{:<8}  {:<11}  {:>8}  {}  {}",
                hop.hop,
                hop.state,
                hop.attempts.map(|a| a.to_string()).unwrap_or_default(),
                hop.key,
                hop.detail.as_deref().unwrap_or_default()
            ))?;
        }
    }
    if reached {
        Ok(())
    } else {
        Err(Failure::NotFound(format!(
            "the receiver has no record of {:?} (message id {id}): the trail stops before it",
            args.key
        )))
    }
}

/// The one front end `name` names, in an operator's words.
fn mechanism_of(name: &str) -> Result<Mechanism, Failure> {
    super::resolve::mechanisms(Some(name))?
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Usage(format!("--mechanism {name:?} names no front end")))
}

fn scoped(namespace: &str, principal: Option<&str>) -> Scope {
    let scope = Scope::new(namespace);
    match principal {
        Some(principal) => scope.with_principal(principal),
        None => scope,
    }
}

/// The record of `storage_key` in `admin`'s store.
async fn record_hop(
    hop: &'static str,
    admin: &Admin,
    storage_key: idempotency_core::StorageKey,
) -> Result<Hop, Failure> {
    let record = admin.inspect(&storage_key).await?;
    let view = record
        .as_ref()
        .map(|record| RecordView::of(record, SystemTime::now()));
    Ok(Hop {
        hop,
        key: storage_key.to_hex(),
        state: view.as_ref().map_or_else(
            || "absent".to_owned(),
            |view| view.state.as_str().to_owned(),
        ),
        attempts: view.as_ref().map(|view| view.attempts),
        detail: view
            .and_then(|view| view.outcome_status)
            .map(|status| format!("outcome {status}")),
    })
}

/// The outbox message `id` in the sender's outbox table, or `purged` (sent and purged past its
/// retention, or never enqueued: the receiver's record tells which).
async fn outbox_hop(global: &Global, id: &str) -> Result<Hop, Failure> {
    let found = match connect_outbox(global).await? {
        #[cfg(feature = "postgres")]
        OutboxStore::Postgres(outbox) => outbox.find(id).await?,
        #[cfg(feature = "mysql")]
        OutboxStore::MySql(outbox) => outbox.find(id).await?,
        #[cfg(feature = "sqlite")]
        OutboxStore::Sqlite(outbox) => outbox.find(id).await?,
    };
    Ok(match found {
        Some(MessageStatus {
            state,
            topic,
            attempts,
            last_error,
        }) => Hop {
            hop: "outbox",
            key: id.to_owned(),
            state,
            attempts: Some(attempts),
            detail: Some(match last_error {
                Some(error) => format!("topic {topic}; last error: {error}"),
                None => format!("topic {topic}"),
            }),
        },
        None => Hop {
            hop: "outbox",
            key: id.to_owned(),
            state: "purged".to_owned(),
            attempts: None,
            detail: Some(
                "not in the outbox table (purged after sending, or never enqueued)".to_owned(),
            ),
        },
    })
}
