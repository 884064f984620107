//! `purge`: expired records in bounded batches, archived first if asked, resumable.

use std::path::Path;
use std::time::Duration;

use idempotency_operations::{Admin, Archive, Cursor};
use serde::Serialize;

use crate::args::{ActionArgs, Global};
use crate::failure::Failure;
use crate::output::{Output, age};
use crate::terminal::{ProgressLine, confirm};

/// The archive `--archive-table` or `--archive-file` asks for (appended to), none otherwise.
pub(crate) fn archive(table: Option<String>, file: Option<&Path>) -> Result<Archive, Failure> {
    match (table, file) {
        (Some(table), _) => Ok(Archive::Table(table)),
        (None, Some(path)) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| Failure::Usage(format!("{}: {error}", path.display())))?;
            Ok(Archive::JsonLines(Box::new(std::io::BufWriter::new(file))))
        }
        (None, None) => Ok(Archive::None),
    }
}

/// What a purge prints.
#[derive(Serialize)]
struct Report {
    purged: u64,
    examined: u64,
    batches: u64,
}

/// Purges expired records. A table configured with a TTL keeps every record last written
/// less than that long ago (the store holds to it whatever `grace` says): the floor is
/// printed first, so that an operator who asked for less knows what stays.
pub(crate) async fn purge(
    admin: &Admin,
    global: &Global,
    action: &ActionArgs,
    mut archive: Archive,
    resume: Option<String>,
    grace: Duration,
    out: &mut Output,
) -> Result<(), Failure> {
    let namespace = global.namespace.as_deref();
    if let Some(floor) = admin.store().ttl_floor().await? {
        let clamped = if grace < floor {
            format!(" (longer than --grace {})", age(millis(grace)))
        } else {
            String::new()
        };
        eprintln!(
            "idempotency: {} is configured with a record TTL of {}: records last written less \
             than that ago are kept{clamped}",
            admin.store().source(),
            age(millis(floor)),
        );
    }
    confirm(
        &format!(
            "purge the expired records of {} ({})?",
            namespace.unwrap_or("every namespace"),
            match &archive {
                Archive::None => "no archive".to_owned(),
                Archive::JsonLines(_) => "archived to the file".to_owned(),
                Archive::Table(table) => format!("archived to table {table}"),
            }
        ),
        action.yes,
    )?;
    let actor = action.actor();
    let from = resume.map(Cursor::from_text).unwrap_or_default();
    let mut progress = ProgressLine::new("purged");
    let mut last = None;
    let report = admin
        .purge(namespace, &mut archive, from, &actor, &mut |step| {
            last = step.cursor.clone();
            progress.show(step);
        })
        .await;
    progress.finish();
    let report = report.map_err(|error| {
        let failure = Failure::from(error);
        let resume = last
            .map(|cursor| format!(" (resume with --resume {cursor})"))
            .unwrap_or_default();
        match failure {
            Failure::Unreachable(text) => Failure::Unreachable(format!("{text}{resume}")),
            Failure::Other(text) => Failure::Other(format!("{text}{resume}")),
            other => other,
        }
    })?;
    let report = Report {
        purged: report.purged,
        examined: report.examined,
        batches: report.batches,
    };
    if out.json() {
        out.line(&report)
    } else {
        out.text(&format!(
            "purged {} of {} examined in {} batches",
            report.purged, report.examined, report.batches
        ))
    }
}

/// `duration` in milliseconds, for [`age`].
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
