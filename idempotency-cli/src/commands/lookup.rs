//! `inspect` and `reconcile`: records by their keys.

use std::io::BufRead;
use std::path::Path;
use std::time::SystemTime;

use idempotency_core::operations::{Admin, RecordView};
use idempotency_core::{Mechanism, Scope, StorageKey};
use serde::Serialize;

use crate::failure::Failure;
use crate::output::Output;

/// What `inspect` prints for a key without a record.
#[derive(Serialize)]
struct Absent<'a> {
    key_hash: &'a str,
    state: &'static str,
}

/// Shows one record (its body too with `body`).
pub(crate) async fn inspect(
    admin: &Admin,
    key: &StorageKey,
    body: bool,
    out: &mut Output,
) -> Result<(), Failure> {
    let Some(record) = admin.inspect(key).await? else {
        let hex = key.to_hex();
        return if out.json() {
            out.line(&Absent {
                key_hash: &hex,
                state: "absent",
            })
        } else {
            out.text(&format!("no record for {hex}"))
        };
    };
    let view = RecordView::of(&record, SystemTime::now());
    let view = if body { view.with_body(&record) } else { view };
    if out.json() {
        return out.line(&view);
    }
    let text = serde_json::to_string_pretty(&view).map_err(|e| Failure::Other(e.to_string()))?;
    out.text(&text)
}

/// The raw keys of `--key` and `--keys-file` (one per line, `-` for stdin, blank lines
/// skipped).
pub(crate) fn raw_keys(mut keys: Vec<String>, file: Option<&Path>) -> Result<Vec<String>, Failure> {
    if let Some(file) = file {
        let read: Box<dyn BufRead> = if file == Path::new("-") {
            Box::new(std::io::stdin().lock())
        } else {
            let opened = std::fs::File::open(file)
                .map_err(|error| Failure::Usage(format!("{}: {error}", file.display())))?;
            Box::new(std::io::BufReader::new(opened))
        };
        for line in read.lines() {
            let line =
                line.map_err(|error| Failure::Usage(format!("{}: {error}", file.display())))?;
            let key = line.trim();
            if !key.is_empty() {
                keys.push(key.to_owned());
            }
        }
    }
    if keys.is_empty() {
        return Err(Failure::Usage(
            "no keys: pass --key K (repeatable) or --keys-file".to_owned(),
        ));
    }
    Ok(keys)
}

/// One key's reconciliation.
#[derive(Serialize)]
struct Reconciled<'a> {
    key: &'a str,
    key_hash: String,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome_status: Option<u16>,
}

/// Each key's state, attempts and outcome status, in order.
pub(crate) async fn reconcile(
    admin: &Admin,
    scope: &Scope,
    mechanism: Mechanism,
    keys: &[String],
    out: &mut Output,
) -> Result<(), Failure> {
    let storage_keys: Vec<StorageKey> = keys
        .iter()
        .map(|key| Admin::storage_key(scope, mechanism, key))
        .collect();
    let records = admin.reconcile(&storage_keys).await?;
    let now = SystemTime::now();
    let width = keys.iter().map(String::len).max().unwrap_or(0).max(3);
    if !out.json() {
        out.text(&format!(
            "{:<width$}  {:<11}  {:>8}  OUTCOME",
            "KEY", "STATE", "ATTEMPTS"
        ))?;
    }
    for ((key, storage_key), record) in keys.iter().zip(&storage_keys).zip(&records) {
        let view = record.as_ref().map(|record| RecordView::of(record, now));
        let line = Reconciled {
            key,
            key_hash: storage_key.to_hex(),
            state: view.as_ref().map_or("absent", |view| view.state.as_str()),
            attempts: view.as_ref().map(|view| view.attempts),
            outcome_status: view.as_ref().and_then(|view| view.outcome_status),
        };
        if out.json() {
            out.line(&line)?;
        } else {
            out.text(&format!(
                "{:<width$}  {:<11}  {:>8}  {}",
                line.key,
                line.state,
                line.attempts.map(|a| a.to_string()).unwrap_or_default(),
                line.outcome_status
                    .map(|s| s.to_string())
                    .unwrap_or_default()
            ))?;
        }
    }
    Ok(())
}
