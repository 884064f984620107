//! `stuck` and `stats`: scans in bounded batches, with a progress line.

use std::time::{Duration, SystemTime};

use idempotency_core::Record;
use idempotency_operations::{Query, RecordView, Tier};
use serde::Serialize;

use crate::args::Global;
use crate::connect::Connected;
use crate::failure::Failure;
use crate::output::{Listed, Output, age};
use crate::terminal::ProgressLine;

/// `record` as a listing prints it at `now`, in `tier` (a two-tier view).
pub(crate) fn listed(record: &Record, now: SystemTime, tier: Option<Tier>) -> Listed {
    Listed {
        view: RecordView::of(record, now),
        mechanism: record.mechanism.map(super::resolve::mechanism_name),
        tier,
    }
}

/// Lists stuck records. A scan that examined nothing where that means the records are
/// elsewhere (no key under a Redis prefix) is a not-found failure; an empty list names what was
/// scanned.
pub(crate) async fn stuck(
    store: &Connected,
    global: &Global,
    older_than: Option<Duration>,
    limit: usize,
    out: &mut Output,
) -> Result<(), Failure> {
    let (records, examined) = scan(store, global, Query::stuck(older_than), limit).await?;
    let now = SystemTime::now();
    let listed: Vec<Listed> = records
        .iter()
        .map(|record| listed(record, now, None))
        .collect();
    if listed.is_empty() {
        nothing_to_scan(store, examined)?;
    }
    out.records(&listed)?;
    out.note(&format!(
        "{} stuck record(s) in {}, {} ({examined} examined)",
        listed.len(),
        store.scanned,
        namespace_of(global)
    ))
}

/// The records `query` finds in `global`'s namespace (at most `limit`), with a progress line,
/// and how many records the scan examined.
pub(crate) async fn scan(
    store: &Connected,
    global: &Global,
    mut query: Query,
    limit: usize,
) -> Result<(Vec<Record>, u64), Failure> {
    query.namespace = global.namespace.clone();
    let mut progress = ProgressLine::new("found");
    let mut examined = 0;
    let records = store
        .admin
        .list(&query, limit, &mut |step| {
            examined = step.examined;
            progress.show(step);
        })
        .await;
    progress.finish();
    Ok((records?, examined))
}

/// Lists what is stuck across a two-tier consumer: its fast tier (`fast`) and its `truth`,
/// leaving out fast-tier records the truth holds completed (said in the summary line).
pub(crate) async fn stuck_in_tiers(
    fast: &Connected,
    truth: &Connected,
    global: &Global,
    older_than: Option<Duration>,
    limit: usize,
    out: &mut Output,
) -> Result<(), Failure> {
    let mut query = Query::stuck(older_than);
    query.namespace = global.namespace.clone();
    let mut progress = ProgressLine::new("found");
    let stuck = fast
        .admin
        .stuck_in_tiers(&truth.admin, &query, limit, &mut |step| progress.show(step))
        .await;
    progress.finish();
    let stuck = stuck?;
    let now = SystemTime::now();
    let listed: Vec<Listed> = stuck
        .records
        .iter()
        .map(|(tier, record)| listed(record, now, Some(*tier)))
        .collect();
    out.records(&listed)?;
    out.note(&format!(
        "{} stuck record(s) in {} (fast tier) and {} (truth), {}; {} fast-tier claim(s) left \
         out, completed in the truth ({} examined)",
        listed.len(),
        fast.scanned,
        truth.scanned,
        namespace_of(global),
        stuck.settled,
        stuck.examined
    ))
}

/// The namespace scanned, in words.
pub(super) fn namespace_of(global: &Global) -> String {
    global.namespace.as_deref().map_or_else(
        || "every namespace".to_owned(),
        |namespace| format!("namespace {namespace}"),
    )
}

/// The failure of a scan that examined nothing where that means the records are elsewhere.
pub(super) fn nothing_to_scan(store: &Connected, examined: u64) -> Result<(), Failure> {
    if store.nothing_is_missing && examined == 0 {
        return Err(Failure::NotFound(format!(
            "nothing to scan: no record in {} (the service's prefix: --prefix or \
             IDEMPOTENCY_PREFIX)",
            store.scanned
        )));
    }
    Ok(())
}

/// The counts `stats` prints.
#[derive(Serialize)]
struct Stats<'a> {
    scanned: &'a str,
    namespace: Option<&'a str>,
    #[serde(flatten)]
    counts: idempotency_operations::Counts,
}

/// Counts records per state.
pub(crate) async fn stats(
    store: &Connected,
    global: &Global,
    since: Option<Duration>,
    older_than: Option<Duration>,
    out: &mut Output,
) -> Result<(), Failure> {
    let now = SystemTime::now();
    let mut query = Query::all();
    query.namespace = global.namespace.clone();
    query.updated_from = since.map(|since| now - since);
    query.updated_before = older_than.map(|older| now - older);
    let mut progress = ProgressLine::new("counted");
    let counts = store
        .admin
        .count(&query, &mut |step| progress.show(step))
        .await;
    progress.finish();
    let counts = counts?;
    if counts.total() == 0 {
        nothing_to_scan(store, counts.examined)?;
    }
    if out.json() {
        return out.line(&Stats {
            scanned: &store.scanned,
            namespace: global.namespace.as_deref(),
            counts,
        });
    }
    out.text(&format!("scanned      {}", store.scanned))?;
    out.text(&format!(
        "namespace    {}",
        global.namespace.as_deref().unwrap_or("(all)")
    ))?;
    out.text(&format!("in progress  {}", counts.in_progress))?;
    out.text(&format!(
        "abandoned    {}{}",
        counts.abandoned,
        counts
            .oldest_abandoned_ms
            .map(|oldest| format!(" (oldest {})", age(oldest)))
            .unwrap_or_default()
    ))?;
    out.text(&format!("completed    {}", counts.completed))?;
    out.text(&format!("examined     {}", counts.examined))
}
