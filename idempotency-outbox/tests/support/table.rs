//! The outbox table's behaviour, written once over `OutboxTable` and run on every database.
//! Each check takes an outbox holding exactly the messages it names, committed.

use std::collections::HashSet;
use std::time::Duration;

use std::io::Write;
use std::sync::{Arc, Mutex};

use base64::Engine;
use idempotency_outbox::OutboxMessage;
use idempotency_outbox::table::{Archive, ArchivedMessage, ClaimBatch, OutboxTable};

use super::{TestOutbox, message, unique};

fn batch(claim: i64, limit: usize) -> ClaimBatch {
    ClaimBatch {
        limit,
        lease: Duration::from_secs(60),
        claim,
    }
}

/// Empty: a message exists exactly when its transaction committed; one id is enqueued once.
pub(crate) async fn an_enqueue_commits_and_rolls_back_with_its_transaction<O: TestOutbox>(
    outbox: &O,
) {
    let first = message("T1", "coupons");
    let once = std::slice::from_ref(&first);
    assert_eq!(outbox.enqueue_then(once, false).await, [true]);
    assert_eq!(outbox.counts().await.unwrap().pending, 0, "rolled back");
    assert_eq!(outbox.enqueue_then(once, true).await, [true]);
    assert_eq!(
        outbox.enqueue_then(once, true).await,
        [false],
        "one id, one message"
    );
    assert_eq!(outbox.counts().await.unwrap().pending, 1);
    assert_eq!(outbox.dead(10).await.unwrap(), []);
}

/// Messages `prefix0..prefix{count}` to topic `t`.
pub(crate) fn numbered(prefix: &str, count: usize) -> Vec<OutboxMessage> {
    (0..count)
        .map(|n| message(&format!("{prefix}{n}"), "t"))
        .collect()
}

/// Holding `numbered("R", n)`: four claimers race in batches of 7 until nothing is left; every
/// message is claimed by exactly one of them.
pub(crate) async fn racing_claims_are_disjoint<O: OutboxTable>(outbox: &O) {
    let total = outbox.counts().await.unwrap().pending as usize;
    assert!(total > 0);
    let claimers: Vec<_> = (1..=4)
        .map(|claimer| {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for round in 0.. {
                    let claim = claimer * 1_000_000 + round;
                    let claimed = outbox.claim(batch(claim, 7)).await.unwrap();
                    if claimed.is_empty() {
                        return seqs;
                    }
                    let mine: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
                    assert_eq!(
                        outbox.mark_sent(claim, &mine).await.unwrap(),
                        mine.len() as u64
                    );
                    seqs.extend(mine);
                }
                seqs
            })
        })
        .collect();
    let mut all = Vec::new();
    for claimer in claimers {
        all.extend(claimer.await.unwrap());
    }
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), total, "no message claimed twice");
    assert_eq!(distinct.len(), total);
    assert_eq!(outbox.counts().await.unwrap().sent, total as u64);
}

/// Holding `[A1, A2, B1, A3, F1]` (A and B ordered by aggregate, F free): claimed one per
/// aggregate at a time, in enqueue order.
pub(crate) fn ordered_messages() -> Vec<OutboxMessage> {
    let a = |n: u32| message(&format!("A{n}"), "t").ordered_by("order-A");
    vec![
        a(1),
        a(2),
        message("B1", "t").ordered_by("order-B"),
        a(3),
        message("F1", "t"),
    ]
}

/// See [`ordered_messages`].
pub(crate) async fn aggregates_go_out_in_order<O: OutboxTable>(outbox: &O) {
    let mut delivered = Vec::new();
    for claim in 1..=10 {
        let claimed = outbox.claim(batch(claim, 10)).await.unwrap();
        if claimed.is_empty() {
            break;
        }
        let aggregates: Vec<_> = claimed
            .iter()
            .filter_map(|c| c.message.aggregate.clone())
            .collect();
        let distinct: HashSet<_> = aggregates.iter().collect();
        assert_eq!(
            aggregates.len(),
            distinct.len(),
            "one per aggregate per claim"
        );
        let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
        delivered.extend(claimed.into_iter().map(|c| c.message.key));
        assert_eq!(
            outbox.mark_sent(claim, &seqs).await.unwrap(),
            seqs.len() as u64
        );
    }
    assert_eq!(delivered, ["A1", "B1", "F1", "A2", "A3"]);
}

/// Holding `numbered("L", 2)`: a claim holds its message until its lease ends; then another
/// claim takes it over, and the first claim's mark changes nothing.
pub(crate) async fn a_lease_holds_then_fences<O: OutboxTable>(outbox: &O) {
    let mine = outbox
        .claim(ClaimBatch {
            limit: 1,
            lease: Duration::from_millis(300),
            claim: 7,
        })
        .await
        .unwrap();
    assert_eq!(mine.len(), 1);
    let theirs = outbox.claim(batch(8, 10)).await.unwrap();
    assert_eq!(theirs.len(), 1, "only the unclaimed message");
    assert_ne!(theirs[0].seq, mine[0].seq);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = outbox.claim(batch(9, 10)).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].seq, mine[0].seq);
    assert_eq!(outbox.mark_sent(7, &[mine[0].seq]).await.unwrap(), 0);
    assert_eq!(outbox.mark_sent(9, &[taken[0].seq]).await.unwrap(), 1);
    assert_eq!(outbox.counts().await.unwrap().sent, 1);
}

/// Holding `numbered("D", 1)`: refusals count, the last allowed one makes it dead (listed with
/// its reason, never claimed), an operator revives it, and it is due again; a release counts
/// nothing.
pub(crate) async fn refusals_go_dead_and_revive<O: OutboxTable>(outbox: &O) {
    let claimed = outbox.claim(batch(1, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    outbox
        .release(1, &[claimed[0].seq], Duration::ZERO)
        .await
        .unwrap();
    let claimed = outbox.claim(batch(2, 10)).await.unwrap();
    assert_eq!(claimed[0].attempts, 0, "a release counts no failure");
    outbox
        .mark_failed(2, claimed[0].seq, "nacked", Duration::ZERO, false)
        .await
        .unwrap();
    let claimed = outbox.claim(batch(3, 10)).await.unwrap();
    assert_eq!(claimed[0].attempts, 1);
    outbox
        .mark_failed(3, claimed[0].seq, "nacked again", Duration::ZERO, true)
        .await
        .unwrap();
    assert!(outbox.claim(batch(4, 10)).await.unwrap().is_empty(), "dead");
    let dead = outbox.dead(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].attempts, dead[0].last_error.as_deref()),
        (2, Some("nacked again"))
    );
    assert!(outbox.revive(&dead[0].message.id).await.unwrap());
    let claimed = outbox.claim(batch(5, 10)).await.unwrap();
    assert_eq!((claimed.len(), claimed[0].attempts), (1, 0));
}

/// Holding `numbered("P", 5)`: sent messages past their retention are purged in bounded
/// batches; pending ones never; `next_due` tells the pending ones are due.
pub(crate) async fn sent_messages_are_purged<O: OutboxTable>(outbox: &O) {
    assert_eq!(outbox.next_due().await.unwrap(), Some(Duration::ZERO));
    let claimed = outbox.claim(batch(1, 3)).await.unwrap();
    let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
    assert_eq!(outbox.mark_sent(1, &seqs).await.unwrap(), 3);
    let kept = outbox
        .purge_sent(Duration::from_secs(3600), 10, &mut Archive::None)
        .await
        .unwrap();
    assert_eq!(kept, 0, "within retention");
    // Sent "before now": SQLite's clock has microseconds, let one pass.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        outbox
            .purge_sent(Duration::ZERO, 2, &mut Archive::None)
            .await
            .unwrap(),
        2,
        "bounded"
    );
    assert_eq!(
        outbox
            .purge_sent(Duration::ZERO, 10, &mut Archive::None)
            .await
            .unwrap(),
        1
    );
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (2, 0));
}

/// Holding `numbered("E", 2)`: a renewal keeps a claim past its first lease; it renews only the
/// claim's own messages, and nothing once another claim took them over.
pub(crate) async fn a_renewal_keeps_the_claim<O: OutboxTable>(outbox: &O) {
    let short = |claim| ClaimBatch {
        limit: 1,
        lease: Duration::from_millis(300),
        claim,
    };
    let mine = outbox.claim(short(1)).await.unwrap();
    let theirs = outbox.claim(short(2)).await.unwrap();
    let (mine, theirs) = (mine[0].seq, theirs[0].seq);
    assert_eq!(
        outbox
            .extend(1, &[mine, theirs], Duration::from_secs(60))
            .await
            .unwrap(),
        1,
        "only its own message"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = outbox.claim(batch(3, 10)).await.unwrap();
    assert_eq!(taken.len(), 1, "the renewed message stays claimed");
    assert_eq!(taken[0].seq, theirs);
    assert_eq!(
        outbox
            .extend(2, &[theirs], Duration::from_secs(60))
            .await
            .unwrap(),
        0,
        "taken over: the claim is lost"
    );
    assert_eq!(outbox.mark_sent(1, &[mine]).await.unwrap(), 1);
}

/// Claims up to `limit` messages under claim `claim` and marks them sent; their ids.
async fn send<O: OutboxTable>(outbox: &O, claim: i64, limit: usize) -> Vec<String> {
    let claimed = outbox.claim(batch(claim, limit)).await.unwrap();
    let seqs: Vec<i64> = claimed.iter().map(|c| c.seq).collect();
    assert_eq!(
        outbox.mark_sent(claim, &seqs).await.unwrap(),
        seqs.len() as u64
    );
    let mut ids: Vec<String> = claimed.into_iter().map(|c| c.message.id).collect();
    ids.sort();
    ids
}

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Holding `numbered("A", 6)`: sent messages purged into an archive table (created by the first
/// purge) land there exactly once, in bounded batches; then the rest into JSON lines, once each,
/// with their payloads. Pending messages are never archived nor deleted. `archived_ids` reads
/// the `id` of every row of an archive table whose `archived_at` is set.
pub(crate) async fn sent_messages_are_archived_once<O: TestOutbox>(outbox: &O) {
    let first = send(outbox, 1, 4).await;
    // Sent "before now": SQLite's clock has microseconds, let one pass.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let table = unique("outbox_archive");
    let mut archive = Archive::Table(table.clone());
    let mut purged = Vec::new();
    for _ in 0..3 {
        purged.push(
            outbox
                .purge_sent(Duration::ZERO, 3, &mut archive)
                .await
                .unwrap(),
        );
    }
    assert_eq!(purged, [3, 1, 0], "bounded batches, then nothing left");
    let mut archived = outbox.archived_ids(&table).await;
    archived.sort();
    assert_eq!(archived, first, "every purged message archived once");
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent), (2, 0), "pending ones stay");

    let rest = send(outbox, 2, 10).await;
    assert_eq!(rest.len(), 2);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let lines = Lines::default();
    let mut archive = Archive::JsonLines(Box::new(lines.clone()));
    let kept = outbox
        .purge_sent(Duration::from_secs(3600), 10, &mut archive)
        .await
        .unwrap();
    assert_eq!(kept, 0, "within retention: nothing written");
    assert!(lines.0.lock().unwrap().is_empty());
    for expected in [2, 0] {
        assert_eq!(
            outbox
                .purge_sent(Duration::ZERO, 10, &mut archive)
                .await
                .unwrap(),
            expected
        );
    }
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let messages: Vec<ArchivedMessage> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut ids: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, rest, "one line per purged message");
    for archived in &messages {
        let payload = base64::engine::general_purpose::STANDARD
            .decode(&archived.payload_base64)
            .unwrap();
        let original = message(&archived.business_key, "t");
        assert_eq!(payload, original.payload);
        assert_eq!(archived.id, original.id);
        assert!(archived.sent_at_ms.unwrap() >= archived.created_at_ms);
        assert!(archived.archived_at_ms >= archived.sent_at_ms.unwrap());
    }
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (0, 0, 0));
}

/// The table suite on the outbox type `$outbox` ([`TestOutbox`]): one test per check above,
/// each on a fresh table holding the messages the check names.
macro_rules! table_suite {
    ($outbox:ty) => {
        support::table::table_suite!(@check $outbox,
            an_enqueue_commits_and_rolls_back_with_its_transaction: Vec::new(),
            racing_claims_are_disjoint: table::numbered("R", 300),
            aggregates_go_out_in_order: table::ordered_messages(),
            a_lease_holds_then_fences: table::numbered("L", 2),
            a_renewal_keeps_the_claim: table::numbered("E", 2),
            refusals_go_dead_and_revive: table::numbered("D", 1),
            sent_messages_are_purged: table::numbered("P", 5),
            sent_messages_are_archived_once: table::numbered("A", 6),
        );
    };
    (@check $outbox:ty, $($check:ident: $messages:expr,)*) => {
        use support::table;
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                if let Some(outbox) = support::holding::<$outbox>(&$messages).await {
                    table::$check(&outbox).await;
                }
            }
        )*
    };
}
pub(crate) use table_suite;
