//! One view of a two-tier consumer's stuck records: its fast tier's and its truth's.

use serde::{Deserialize, Serialize};

use super::{Admin, Progress, Query};
use idempotency_core::{Record, RecordState, StoreError};

/// Which store of a two-tier consumer a record is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// The fast tier (Redis, typically): the consumer's engine.
    Fast,
    /// The truth (SQL): the record claimed in the business transaction.
    Truth,
}

impl Tier {
    /// `"fast"` or `"truth"`: the names in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Truth => "truth",
        }
    }
}

/// What is stuck across both tiers ([`Admin::stuck_in_tiers`]).
#[derive(Clone, Debug, Default)]
pub struct TieredStuck {
    /// The stuck records, the fast tier's first, each with its tier.
    pub records: Vec<(Tier, Record)>,
    /// Fast-tier records left out because the truth holds their key completed.
    pub settled: u64,
    /// Records examined in both stores.
    pub examined: u64,
}

impl Admin {
    /// The records of `query` (a [`Query::stuck`]) in this store, a two-tier consumer's fast
    /// tier, and in its `truth`, at most `limit` in all. A fast-tier record whose storage key
    /// the truth holds completed is left out (counted in `settled`): the truth settled the
    /// message (a redelivery after a crash, say), and the fast-tier claim only waits to expire.
    /// A fast-tier record without a truth record, or with one still in progress, is listed.
    /// Reads only: nothing is written to either store (the fast-tier claim's lease is not
    /// this view's to end).
    pub async fn stuck_in_tiers(
        &self,
        truth: &Admin,
        query: &Query,
        limit: usize,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<TieredStuck, StoreError> {
        let mut examined = 0;
        let fast = self
            .list(query, limit, &mut |step| {
                examined = step.examined;
                progress(step);
            })
            .await?;
        let keys: Vec<_> = fast.iter().map(|record| record.key).collect();
        let in_truth = truth.reconcile(&keys).await?;
        let mut stuck = TieredStuck::default();
        for (record, truth_record) in fast.into_iter().zip(in_truth) {
            match truth_record {
                Some(settled) if settled.state == RecordState::Completed => stuck.settled += 1,
                _ => stuck.records.push((Tier::Fast, record)),
            }
        }
        let room = limit.saturating_sub(stuck.records.len());
        let mut truth_examined = 0;
        let in_truth = truth
            .list(query, room, &mut |step| {
                truth_examined = step.examined;
                progress(step);
            })
            .await?;
        stuck
            .records
            .extend(in_truth.into_iter().map(|record| (Tier::Truth, record)));
        stuck.examined = examined + truth_examined;
        Ok(stuck)
    }
}
