//! What a fault run saw (every answer, every business effect) and what it proves per key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// How long after the fault is lifted a key may still answer 409 for a claim nobody owns.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(1);
/// How much longer than the store timeout an answer may take.
pub const ANSWER_SLACK: Duration = Duration::from_secs(1);

/// One answer a client got.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The request's key.
    pub key: String,
    /// When the request was sent, since the run started.
    pub sent_at: Duration,
    /// How long the answer took.
    pub took: Duration,
    /// The HTTP status.
    pub status: u16,
    /// Whether it was a replay (`Idempotent-Replayed`).
    pub replayed: bool,
    /// Whether it carried `Retry-After`.
    pub retry_after: bool,
}

/// Every answer and every business effect of a run, as they happen.
#[derive(Debug, Default)]
pub struct Log {
    answers: Mutex<Vec<Answer>>,
    effects: Mutex<HashMap<String, u32>>,
}

impl Log {
    /// Notes an answer.
    pub fn answered(&self, answer: Answer) {
        lock(&self.answers).push(answer);
    }

    /// Notes one business effect (one handler execution) for `key`.
    pub fn effect(&self, key: &str) {
        *lock(&self.effects).entry(key.to_owned()).or_default() += 1;
    }

    /// How many times `key`'s handler ran.
    pub fn effects(&self, key: &str) -> u32 {
        lock(&self.effects).get(key).copied().unwrap_or(0)
    }

    /// What the log proves, for a fault lifted at `healed_at` under `store_timeout`.
    pub fn report(&self, healed_at: Duration, store_timeout: Duration) -> Report {
        let answers = lock(&self.answers);
        let effects = lock(&self.effects);
        let mut report = Report {
            requests: answers.len(),
            store_timeout,
            ..Report::default()
        };
        let mut keys: HashMap<&str, KeySeen> = HashMap::new();
        for answer in answers.iter() {
            *report.statuses.entry(answer.status).or_default() += 1;
            report.longest = report.longest.max(answer.took);
            let seen = keys.entry(&answer.key).or_default();
            match answer.status {
                201 => {
                    seen.succeeded = true;
                    if effects.get(&answer.key).copied() != Some(1) {
                        report.unbacked += 1;
                    }
                    seen.last_replayed = answer.replayed;
                }
                409 | 503 => {
                    if !answer.retry_after {
                        report.missing_retry_after += 1;
                    }
                    if answer.status == 503 {
                        seen.refused = true;
                    } else if answer.sent_at > healed_at + ORPHAN_GRACE {
                        seen.orphaned = true;
                    }
                }
                _ => report.unexpected += 1,
            }
        }
        report.keys = keys.len();
        for (key, seen) in &keys {
            report.refused_keys += usize::from(seen.refused);
            report.orphans += usize::from(seen.orphaned);
            report.unrecovered += usize::from(!seen.succeeded);
            report.unsettled += usize::from(seen.succeeded && !seen.last_replayed);
            let runs = effects.get(*key).copied().unwrap_or(0);
            report.max_executions = report.max_executions.max(runs);
        }
        report
    }
}

#[derive(Default)]
struct KeySeen {
    succeeded: bool,
    refused: bool,
    orphaned: bool,
    /// Whether the key's last success was a replay (the final pass replays every key).
    last_replayed: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a run proves.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Requests sent (retries included).
    pub requests: usize,
    /// Answers by status.
    pub statuses: BTreeMap<u16, usize>,
    /// Distinct keys.
    pub keys: usize,
    /// Keys answered 503 at least once (the fault was seen).
    pub refused_keys: usize,
    /// The most handler executions of one key.
    pub max_executions: u32,
    /// Keys answered 409 later than [`ORPHAN_GRACE`] after the fault was lifted: a claim
    /// nobody owns (each key is sent by one client at a time, so no 409 is another owner's).
    pub orphans: usize,
    /// Keys that never got a success.
    pub unrecovered: usize,
    /// Success answers whose key's handler did not run exactly once.
    pub unbacked: usize,
    /// Keys whose success was not replayed at the end (the outcome never got stored).
    pub unsettled: usize,
    /// 409 and 503 answers without `Retry-After`.
    pub missing_retry_after: usize,
    /// Answers other than 201, 409 and 503.
    pub unexpected: usize,
    /// The longest answer.
    pub longest: Duration,
    /// The store timeout of the run.
    pub store_timeout: Duration,
}

impl Report {
    /// The floors the run broke, in words; empty if it kept them all.
    pub fn violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let mut check = |ok: bool, what: String| {
            if !ok {
                broken.push(what);
            }
        };
        check(
            self.refused_keys > 0,
            "the fault was never seen (no 503)".to_owned(),
        );
        check(
            self.max_executions <= 1,
            format!("a key ran {} times", self.max_executions),
        );
        check(
            self.orphans == 0,
            format!(
                "{} keys answered 409 with no owner after recovery",
                self.orphans
            ),
        );
        check(
            self.unrecovered == 0,
            format!("{} keys never succeeded", self.unrecovered),
        );
        check(
            self.unbacked == 0,
            format!("{} successes not backed by one execution", self.unbacked),
        );
        check(
            self.unsettled == 0,
            format!("{} keys' outcomes were never stored", self.unsettled),
        );
        check(
            self.missing_retry_after == 0,
            format!("{} refusals without Retry-After", self.missing_retry_after),
        );
        check(
            self.unexpected == 0,
            format!(
                "{} unexpected answers: {:?}",
                self.unexpected, self.statuses
            ),
        );
        check(
            self.longest <= self.store_timeout + ANSWER_SLACK,
            format!(
                "an answer took {:?}, past the store timeout {:?} + {:?}",
                self.longest, self.store_timeout, ANSWER_SLACK
            ),
        );
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(key: &str, at_ms: u64, status: u16, replayed: bool) -> Answer {
        Answer {
            key: key.to_owned(),
            sent_at: Duration::from_millis(at_ms),
            took: Duration::from_millis(5),
            status,
            replayed,
            retry_after: status != 201,
        }
    }

    #[test]
    fn a_clean_run_keeps_every_floor() {
        let log = Log::default();
        log.answered(answer("a", 10, 503, false));
        log.effect("a");
        log.answered(answer("a", 3_000, 201, false));
        log.answered(answer("a", 9_000, 201, true));
        let report = log.report(Duration::from_secs(2), Duration::from_secs(1));
        assert!(report.violations().is_empty(), "{:?}", report.violations());
        assert_eq!((report.keys, report.refused_keys), (1, 1));
    }

    #[test]
    fn orphans_doubles_and_lost_outcomes_are_caught() {
        let log = Log::default();
        log.answered(answer("orphan", 10, 503, false));
        log.answered(answer("orphan", 3_500, 409, false));
        log.answered(answer("twice", 10, 201, false));
        log.effect("twice");
        log.effect("twice");
        log.answered(answer("lost", 10, 201, false));
        log.effect("lost");
        let report = log.report(Duration::from_secs(2), Duration::from_secs(1));
        let broken = report.violations().join("; ");
        assert_eq!(report.orphans, 1, "{broken}");
        assert_eq!(report.max_executions, 2, "{broken}");
        assert_eq!(report.unrecovered, 1, "{broken}");
        assert_eq!(report.unsettled, 2, "{broken}");
        assert_eq!(report.unbacked, 1, "{broken}");
    }
}
