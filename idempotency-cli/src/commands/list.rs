//! `stuck` and `stats`: scans in bounded batches, with a progress line.

use std::time::{Duration, SystemTime};

use idempotency_core::operations::{Admin, Query, RecordView};
use serde::Serialize;

use crate::args::Global;
use crate::failure::Failure;
use crate::output::{Output, age};
use crate::terminal::ProgressLine;

/// Lists stuck records.
pub(crate) async fn stuck(
    admin: &Admin,
    global: &Global,
    older_than: Option<Duration>,
    limit: usize,
    out: &mut Output,
) -> Result<(), Failure> {
    let mut query = Query::stuck(older_than);
    query.namespace = global.namespace.clone();
    let mut progress = ProgressLine::new("found");
    let records = admin
        .list(&query, limit, &mut |step| progress.show(step))
        .await;
    progress.finish();
    let now = SystemTime::now();
    let views: Vec<RecordView> = records?
        .iter()
        .map(|record| RecordView::of(record, now))
        .collect();
    out.records(&views)
}

/// The counts `stats` prints.
#[derive(Serialize)]
struct Stats<'a> {
    namespace: Option<&'a str>,
    #[serde(flatten)]
    counts: idempotency_core::operations::Counts,
}

/// Counts records per state.
pub(crate) async fn stats(
    admin: &Admin,
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
    let counts = admin.count(&query, &mut |step| progress.show(step)).await;
    progress.finish();
    let counts = counts?;
    if out.json() {
        return out.line(&Stats {
            namespace: global.namespace.as_deref(),
            counts,
        });
    }
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
