//! `inspect` and `reconcile`: records by their keys.

use std::io::BufRead;
use std::path::Path;
use std::time::SystemTime;

use idempotency_core::{Mechanism, Record, Scope, StorageKey};
use idempotency_operations::{Admin, Reconciliation, RecordView};
use serde::Serialize;

use super::resolve::{Found, by_id, candidates, mechanism_name};
use crate::failure::Failure;
use crate::output::Output;

/// A record as `inspect` prints it: its view, and the front end that wrote it when it was
/// found by its raw key.
#[derive(Serialize)]
struct Inspected {
    #[serde(flatten)]
    view: RecordView,
    #[serde(skip_serializing_if = "Option::is_none")]
    mechanism: Option<&'static str>,
}

/// Shows the record `found` (its body too with `body`).
pub(crate) fn inspect(found: &Found, body: bool, out: &mut Output) -> Result<(), Failure> {
    let view = RecordView::of(&found.record, SystemTime::now());
    let view = if body {
        view.with_body(&found.record)
    } else {
        view
    };
    let inspected = Inspected {
        view,
        mechanism: found
            .record
            .mechanism
            .or(found.mechanism)
            .map(mechanism_name),
    };
    if out.json() {
        return out.line(&inspected);
    }
    let text =
        serde_json::to_string_pretty(&inspected).map_err(|e| Failure::Other(e.to_string()))?;
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

/// One key's reconciliation line, with the raw key the operator gave (none for an id).
#[derive(Serialize)]
struct Reconciled<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    key: &'a str,
    #[serde(flatten)]
    line: Reconciliation,
}

/// Each key's state, attempts and outcome status, in order, under each front end of
/// `mechanisms` that holds a record of it (one line per record; `absent` when none does),
/// in one read of every candidate key.
pub(crate) async fn reconcile(
    admin: &Admin,
    scope: &Scope,
    mechanisms: &[Mechanism],
    keys: &[String],
    out: &mut Output,
) -> Result<(), Failure> {
    let candidates: Vec<Vec<(Mechanism, StorageKey)>> = keys
        .iter()
        .map(|key| candidates(scope, mechanisms, key))
        .collect();
    let storage_keys: Vec<StorageKey> = candidates.iter().flatten().map(|(_, key)| *key).collect();
    let mut records = admin.reconcile(&storage_keys).await?.into_iter();
    let now = SystemTime::now();
    let width = keys.iter().map(String::len).max().unwrap_or(0).max(3);
    if !out.json() {
        out.text(&format!(
            "{:<width$}  {:<11}  {:<11}  {:>8}  {:<7}  KEY_HASH",
            "KEY", "STATE", "MECHANISM", "ATTEMPTS", "OUTCOME"
        ))?;
    }
    for (key, candidates) in keys.iter().zip(&candidates) {
        // The records were read in the candidates' order, all keys' in one list.
        let records: Vec<Option<Record>> = records.by_ref().take(candidates.len()).collect();
        let found = candidates
            .iter()
            .zip(&records)
            .map(|((mechanism, storage_key), record)| {
                (mechanism_name(*mechanism), *storage_key, record.as_ref())
            });
        for line in Reconciliation::of_key(found, now) {
            print_line(&Reconciled { key, line }, Some(width), out)?;
        }
    }
    Ok(())
}

/// One reconciliation line: JSON, or a row of the table for people (its KEY column `width`
/// wide, none without a width).
fn print_line(
    line: &Reconciled<'_>,
    width: Option<usize>,
    out: &mut Output,
) -> Result<(), Failure> {
    if out.json() {
        return out.line(line);
    }
    let key = width.map_or_else(String::new, |width| format!("{:<width$}  ", line.key));
    let line = &line.line;
    out.text(&format!(
        "{key}{:<11}  {:<11}  {:>8}  {:<7}  {}",
        line.state,
        line.mechanism.unwrap_or("-"),
        line.attempts.map(|a| a.to_string()).unwrap_or_default(),
        line.outcome_status
            .map(|s| s.to_string())
            .unwrap_or_default(),
        line.key_hash
    ))
}

/// Each id's (whole, or a unique prefix) state, attempts and outcome status, in order
/// (`absent`: no record); a prefix that fits several records is an ambiguous failure.
pub(crate) async fn reconcile_ids(
    admin: &Admin,
    ids: &[String],
    out: &mut Output,
) -> Result<(), Failure> {
    if !out.json() {
        out.text(&format!(
            "{:<11}  {:<11}  {:>8}  {:<7}  KEY_HASH",
            "STATE", "MECHANISM", "ATTEMPTS", "OUTCOME"
        ))?;
    }
    let now = SystemTime::now();
    for id in ids {
        let record = by_id(admin, id).await?;
        let line = match &record {
            Some(record) => {
                Reconciliation::found(record, record.mechanism.map(mechanism_name), now)
            }
            None => Reconciliation::absent(id.clone()),
        };
        let line = Reconciled { key: "", line };
        print_line(&line, None, out)?;
    }
    Ok(())
}
