//! `conflicts`: the records that met a conflicting duplicate, for reconciliation.

use std::time::{Duration, SystemTime};

use idempotency_operations::{Query, RecordView};

use super::list::{namespace_of, nothing_to_scan, scan};
use crate::args::Global;
use crate::connect::Connected;
use crate::failure::Failure;
use crate::output::{Output, age};

/// Lists the records marked with conflicts (whose last one came within `since`, if given):
/// JSON lines of their views, or a table with the count and the last one's age.
pub(crate) async fn list(
    store: &Connected,
    global: &Global,
    since: Option<Duration>,
    limit: usize,
    out: &mut Output,
) -> Result<(), Failure> {
    let (records, examined) = scan(store, global, Query::all().min_conflicts(1), limit).await?;
    let now = SystemTime::now();
    let from = since.map(|since| now - since);
    let views: Vec<RecordView> = records
        .iter()
        .filter(|record| {
            from.is_none_or(|from| record.last_conflict_at.is_some_and(|at| at >= from))
        })
        .map(|record| RecordView::of(record, now))
        .collect();
    if views.is_empty() {
        nothing_to_scan(store, examined)?;
    }
    if out.json() {
        views.iter().try_for_each(|view| out.line(view))?;
    } else {
        table(&views, now, out)?;
    }
    out.note(&format!(
        "{} record(s) with conflicts in {}, {} ({examined} examined)",
        views.len(),
        store.scanned,
        namespace_of(global)
    ))
}

/// The table for people: storage key, namespace, state, conflicts, the last one's age, token.
fn table(views: &[RecordView], now: SystemTime, out: &mut Output) -> Result<(), Failure> {
    let now_ms = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let width = views
        .iter()
        .map(|view| view.namespace.len())
        .max()
        .unwrap_or(0)
        .max("NAMESPACE".len());
    out.text(&format!(
        "{:<64}  {:<width$}  {:<11}  {:>9}  {:>13}  {:>20}",
        "KEY_HASH", "NAMESPACE", "STATE", "CONFLICTS", "LAST_CONFLICT", "TOKEN"
    ))?;
    for view in views {
        let last = view
            .last_conflict_at_ms
            .map(|at| format!("{} ago", age(now_ms.saturating_sub(at))))
            .unwrap_or_default();
        out.text(&format!(
            "{:<64}  {:<width$}  {:<11}  {:>9}  {:>13}  {:>20}",
            view.key_hash,
            view.namespace,
            view.state.as_str(),
            view.conflicts,
            last,
            view.token
        ))?;
    }
    Ok(())
}
