//! What commands print: one JSON object per line (`--json`), or a table for people.

use std::io::Write;

use idempotency_operations::{RecordView, Tier};
use serde::Serialize;

use crate::failure::Failure;

/// Where a command prints its results (stdout).
pub(crate) struct Output {
    json: bool,
    out: std::io::StdoutLock<'static>,
}

fn io(error: std::io::Error) -> Failure {
    Failure::Other(format!("stdout: {error}"))
}

impl Output {
    /// Prints JSON lines if `json`, tables otherwise.
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            out: std::io::stdout().lock(),
        }
    }

    /// Whether results are JSON lines.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// One JSON object on its own line.
    pub(crate) fn line(&mut self, value: &impl Serialize) -> Result<(), Failure> {
        let text =
            serde_json::to_string(value).map_err(|error| Failure::Other(error.to_string()))?;
        writeln!(self.out, "{text}").map_err(io)
    }

    /// A line of text for people.
    pub(crate) fn text(&mut self, text: &str) -> Result<(), Failure> {
        writeln!(self.out, "{text}").map_err(io)
    }

    /// A summary line: on stdout in a table for people, on stderr beside JSON lines (which
    /// stay one record per line).
    pub(crate) fn note(&mut self, text: &str) -> Result<(), Failure> {
        if self.json {
            eprintln!("{text}");
            Ok(())
        } else {
            self.text(text)
        }
    }

    /// Records: JSON lines, or a table of their ids (storage keys in full: what `--key-hash`
    /// takes), tiers (a two-tier view only), namespaces, mechanisms (`-`: not known),
    /// states, attempts, ages, tokens and, where a run with steps is listed, the step each run
    /// stopped at.
    pub(crate) fn records(&mut self, listed: &[Listed]) -> Result<(), Failure> {
        if self.json {
            return listed.iter().try_for_each(|record| self.line(record));
        }
        let tiers = listed.iter().any(|record| record.tier.is_some());
        let namespace_width = listed
            .iter()
            .map(|record| record.view.namespace.len())
            .max()
            .unwrap_or(0)
            .max("NAMESPACE".len());
        let tier = |text: &str| {
            if tiers {
                format!("{text:<5}  ")
            } else {
                String::new()
            }
        };
        let steps = listed.iter().any(|record| record.view.step.is_some());
        let step = |text: &str| {
            if steps {
                format!("  {text}")
            } else {
                String::new()
            }
        };
        self.text(&format!(
            "{:<64}  {}{:<namespace_width$}  {:<11}  {:<11}  {:>8}  {:>10}  {:>20}{}",
            "KEY_HASH",
            tier("TIER"),
            "NAMESPACE",
            "MECHANISM",
            "STATE",
            "ATTEMPTS",
            "AGE",
            "TOKEN",
            step("STEP")
        ))?;
        for record in listed {
            let view = &record.view;
            self.text(&format!(
                "{:<64}  {}{:<namespace_width$}  {:<11}  {:<11}  {:>8}  {:>10}  {:>20}{}",
                view.key_hash,
                tier(record.tier.map_or("", Tier::as_str)),
                view.namespace,
                record.mechanism.unwrap_or("-"),
                view.state.as_str(),
                view.attempts,
                age(view.age_ms),
                view.token,
                step(view.step.as_deref().unwrap_or("-"))
            ))?;
        }
        Ok(())
    }
}

/// A record as a listing prints it: its view, the front end that wrote it where known, and
/// its tier in a two-tier view.
#[derive(Serialize)]
pub(crate) struct Listed {
    /// The record.
    #[serde(flatten)]
    pub(crate) view: RecordView,
    /// The front end that wrote it (`http/grpc`, `function`, `transaction`, `consumer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mechanism: Option<&'static str>,
    /// Where it is, in a two-tier view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tier: Option<Tier>,
}

/// An age for people: `850ms`, `42s`, `17m`, `5h`, `3d`.
pub(crate) fn age(millis: u64) -> String {
    match millis {
        0..1_000 => format!("{millis}ms"),
        1_000..60_000 => format!("{}s", millis / 1_000),
        60_000..3_600_000 => format!("{}m", millis / 60_000),
        3_600_000..86_400_000 => format!("{}h", millis / 3_600_000),
        _ => format!("{}d", millis / 86_400_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(17 * 60_000), "17m");
        assert_eq!(age(5 * 3_600_000), "5h");
        assert_eq!(age(3 * 86_400_000), "3d");
    }
}
