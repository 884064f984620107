//! The statements of runs with steps (crate `idempotency-steps`) on PostgreSQL.

use super::{NOW, TAKEOVER};

/// A run's hold on its key: a session-level advisory lock on the key's first eight bytes.
const HOLD: &str = "pg_try_advisory_lock(\
    ('x' || encode(substring($1 from 1 for 8), 'hex'))::bit(64)::bigint)";

/// A run's claim of a key that exists, by an owner that holds it: takes over an in-progress
/// run whose owner (it held the key) is gone, unless another payload's checkpoints are on it,
/// and a completed record once its TTL ended.
pub(super) fn start_held(t: &str, seq: &str) -> String {
    // A completed record once its TTL ended; an in-progress one of the same payload, or with
    // no checkpoint yet.
    let takeable = |x: &str, fingerprint: &str| {
        format!(
            "CASE WHEN {x}.state = 'completed' THEN {x}.expires_at <= {NOW} \
             ELSE {x}.fingerprint = {fingerprint} OR {x}.progress IS NULL END"
        )
    };
    let set = TAKEOVER
        .iter()
        .map(|(column, value)| {
            format!(
                "{column} = CASE WHEN {} THEN {value} ELSE r.{column} END",
                takeable("r", "excluded.fingerprint")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let answer = |alias: &str, acquired: &str| {
        format!(
            "SELECT {acquired} AS acquired, {alias}.state, {alias}.fingerprint, \
             {alias}.token, {alias}.attempts::bigint AS attempts, \
             GREATEST(0, EXTRACT(EPOCH FROM {alias}.expires_at - {NOW}) * 1000000)::bigint \
             AS remaining_us, {alias}.response_status::bigint AS response_status, \
             {alias}.response_body FROM "
        )
    };
    format!(
        "WITH cur AS (SELECT state, fingerprint, token, attempts, expires_at, response_status, \
           response_body, progress FROM {t} WHERE key_hash = $1), \
         tok AS (SELECT nextval('{seq}') AS v), \
         ins AS (\
           INSERT INTO {t} AS r (key_hash, namespace, fingerprint, state, token, claim_id, \
           attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
           SELECT $1, $2, $3, 'in_progress', tok.v, $5, 1, {NOW}, {NOW}, \
           {NOW} + $4 * interval '1 microsecond', $6, $7 FROM tok \
           WHERE NOT EXISTS (SELECT 1 FROM cur WHERE NOT ({})) \
           ON CONFLICT (key_hash) DO UPDATE SET {set} \
           RETURNING r.state, r.fingerprint, r.token, r.attempts, r.expires_at, \
           r.response_status, r.response_body) \
         {}ins i \
         UNION ALL \
         {}cur c WHERE NOT EXISTS (SELECT 1 FROM ins)",
        takeable("cur", "$3"),
        answer("i", "i.token = (SELECT v FROM tok)"),
        answer("c", "false"),
    )
}

/// A run's start: takes the hold and, with it, inserts a fresh key (a plain insert, the common
/// case); returns `held` and the token, `NULL` when the key exists, which [`start_held`] then
/// decides.
pub(super) fn start(t: &str, seq: &str) -> String {
    format!(
        "WITH h AS (SELECT {HOLD} AS held), \
         ins AS (INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, \
           attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
           SELECT $1, $2, $3, 'in_progress', nextval('{seq}'), $5, 1, {NOW}, {NOW}, \
           {NOW} + $4 * interval '1 microsecond', $6, $7 FROM h WHERE h.held \
           ON CONFLICT (key_hash) DO NOTHING RETURNING token) \
         SELECT h.held, (SELECT token FROM ins) AS token FROM h"
    )
}
