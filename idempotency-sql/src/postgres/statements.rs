//! The statements of a PostgreSQL record table, built once per table name.

use super::{NOW, Sql, TAKEOVER, runs};
use crate::conflicts::MarkSql;
use crate::dialect::TableSql;

fn record_columns() -> String {
    let us = |column: &str| format!("(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint");
    format!(
        "key_hash, namespace, fingerprint, state, token, attempts::bigint AS attempts, \
         {} AS created_us, {} AS updated_us, {} AS completed_us, {} AS expires_us, \
         response_status::bigint AS response_status, response_body, \
         conflicts::bigint AS conflicts, {} AS last_conflict_us, mechanism, \
         key_derivation::bigint AS key_derivation, progress",
        us("created_at"),
        us("updated_at"),
        us("completed_at"),
        us("expires_at"),
        us("last_conflict_at")
    )
}

/// The statements of `table`.
pub(super) fn statements(table: &str) -> TableSql<Sql> {
    {
        let t = format!("\"{table}\"");
        let seq = format!("\"{table}_token_seq\"");
        let expired = format!("r.expires_at <= {NOW}");
        // Completed past the TTL, or an abandoned lease past its end plus the grace ($2 µs);
        // last written at least the table's configured TTL ($3 µs) ago.
        let purgeable = format!(
            "expires_at <= {NOW} AND (state = 'completed' OR \
             expires_at <= {NOW} - $2 * interval '1 microsecond') \
             AND updated_at <= {NOW} - $3 * interval '1 microsecond'"
        );
        // On conflict: take an expired row over, keep a live one unchanged (the no-op update only
        // happens for a row this statement's snapshot could not see, to return its latest
        // version).
        let takeover = TAKEOVER
            .iter()
            .map(|(column, value)| {
                format!("{column} = CASE WHEN {expired} THEN {value} ELSE r.{column} END")
            })
            .collect::<Vec<_>>()
            .join(", ");
        let answer = |alias: &str, acquired: &str| {
            format!(
                "SELECT {acquired} AS acquired, {alias}.state, {alias}.fingerprint, {alias}.token, \
                 {alias}.attempts::bigint AS attempts, \
                 GREATEST(0, EXTRACT(EPOCH FROM {alias}.expires_at - {NOW}) * 1000000)::bigint \
                 AS remaining_us, {alias}.response_status::bigint AS response_status, \
                 {alias}.response_body"
            )
        };
        let claim = |bounded: bool| {
            // Bounded: `lt` sets the wait before `ins` runs (`tok` reads it), `back` restores the
            // caller's setting after (it reads `ins`), so the business statements that follow in
            // the transaction keep their own lock timeout.
            // What wrote the record: after the lock timeout where there is one.
            let origin = if bounded { "$7, $8" } else { "$6, $7" };
            let (lt, from_lt, back, with_back) = if bounded {
                (
                    "lt AS (SELECT current_setting('lock_timeout') AS old, \
                     set_config('lock_timeout', $6, true) AS new), ",
                    " FROM lt",
                    ", back AS (SELECT set_config('lock_timeout', lt.old, true) AS old FROM lt \
                     WHERE (SELECT count(*) FROM ins) >= 0)",
                    " CROSS JOIN back",
                )
            } else {
                ("", "", "", "")
            };
            format!(
                "WITH {lt}cur AS (\
               SELECT state, fingerprint, token, attempts, expires_at, response_status, \
               response_body FROM {t} WHERE key_hash = $1), \
             tok AS (SELECT nextval('{seq}') AS v{from_lt}), \
             ins AS (\
               INSERT INTO {t} AS r (key_hash, namespace, fingerprint, state, token, claim_id, \
               attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
               SELECT $1, $2, $3, 'in_progress', tok.v, $5, 1, {NOW}, {NOW}, \
               {NOW} + $4 * interval '1 microsecond', {origin} FROM tok \
               WHERE NOT EXISTS (SELECT 1 FROM cur WHERE cur.expires_at > {NOW}) \
               ON CONFLICT (key_hash) DO UPDATE SET {takeover} \
               RETURNING r.state, r.fingerprint, r.token, r.attempts, r.expires_at, \
               r.response_status, r.response_body){back} \
             {} FROM ins i{with_back} \
             UNION ALL \
             {} FROM cur c{with_back} WHERE NOT EXISTS (SELECT 1 FROM ins)",
                answer("i", "i.token = (SELECT v FROM tok)"),
                answer("c", "false"),
            )
        };
        // `lt` sets the bound before `ins` runs (its `SELECT` reads `lt`); the target list reads
        // `ins` before it restores the caller's setting. In progress, a lease of $4 µs.
        let insert_fresh = format!(
            "WITH lt AS (SELECT current_setting('lock_timeout') AS old, \
               set_config('lock_timeout', $6, true) AS new), \
             ins AS (INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, \
               attempts, created_at, updated_at, expires_at, mechanism, key_derivation) \
               SELECT $1, $2, $3, 'in_progress', nextval('{seq}'), $5, 1, {NOW}, {NOW}, \
               {NOW} + $4 * interval '1 microsecond', $7, $8 FROM lt \
               ON CONFLICT (key_hash) DO NOTHING RETURNING token) \
             SELECT (SELECT token FROM ins) AS token, \
               set_config('lock_timeout', lt.old, true) AS restored FROM lt"
        );
        // Written last in its transaction: completed (no claimer's id: nothing undoes it), its
        // outcome ($7, $8), kept $4 µs (the TTL). Its wait on a concurrent copy's uncommitted
        // row is the session's: that copy is at its end (written last too) or running the
        // same work.
        let insert_recorded = format!(
            "INSERT INTO {t} (key_hash, namespace, fingerprint, state, token, claim_id, attempts, \
               created_at, updated_at, completed_at, expires_at, response_status, response_body, \
               mechanism, key_derivation) \
             VALUES ($1, $2, $3, 'completed', nextval('{seq}'), NULL, 1, {NOW}, {NOW}, {NOW}, \
               {NOW} + $4 * interval '1 microsecond', $7, $8, $5, $6) \
             ON CONFLICT (key_hash) DO NOTHING"
        );
        let (start, start_held) = (runs::start(&t, &seq), runs::start_held(&t, &seq));
        let owned = "key_hash = $1 AND token = $2 AND state = 'in_progress'";
        let marks = MarkSql::new(&t, "ADD COLUMN IF NOT EXISTS", "TIMESTAMPTZ", NOW, "$1");
        TableSql {
            own: Sql {
                complete_unhold: format!(
                    "UPDATE {t} SET state = 'completed', response_status = $3, response_body = $4, \
                     completed_at = {NOW}, updated_at = {NOW}, \
                     expires_at = {NOW} + $5 * interval '1 microsecond' WHERE {owned} \
                     RETURNING pg_advisory_unlock(\
                       ('x' || encode(substring(key_hash from 1 for 8), 'hex'))::bit(64)::bigint)"
                ),
                insert_fresh,
                start,
                start_held,
                insert_recorded,
                flag: format!(
                    "UPDATE {t} SET waited = true \
                     WHERE key_hash = $1 AND state = 'in_progress' AND waited IS NOT TRUE"
                ),
                wake_ups: Default::default(),
                claim: claim(false),
                claim_bounded: claim(true),
            },
            // A row a waiter flagged is notified on the table's channel (`wake_ups`); one row
            // back per row completed, as an `UPDATE` counts them.
            complete: notifying(
                &format!(
                    "UPDATE {t} SET state = 'completed', response_status = $3, \
                     response_body = $4, completed_at = {NOW}, updated_at = {NOW}, \
                     expires_at = {NOW} + $5 * interval '1 microsecond' WHERE {owned}"
                ),
                table,
            ),
            touch: format!(
                "UPDATE {t} SET expires_at = {NOW} + $3 * interval '1 microsecond', \
                 updated_at = {NOW} WHERE {owned}"
            ),
            // The lease is renewed only once half of it is spent: otherwise the indexed
            // `expires_at` and `updated_at` keep their values, and the checkpoint is a HOT update
            // (no index entries written).
            checkpoint: format!(
                "UPDATE {t} SET progress = $3, \
                 expires_at = CASE WHEN expires_at < {NOW} + $4 / 2 * interval '1 microsecond' \
                   THEN {NOW} + $4 * interval '1 microsecond' ELSE expires_at END, \
                 updated_at = CASE WHEN expires_at < {NOW} + $4 / 2 * interval '1 microsecond' \
                   THEN {NOW} ELSE updated_at END \
                 WHERE {owned}"
            ),
            resume: format!(
                "UPDATE {t} SET expires_at = created_at, attempts = 1, updated_at = {NOW} \
                 WHERE {owned}"
            ),
            expire: format!(
                "UPDATE {t} SET expires_at = created_at WHERE key_hash = $1 AND state = 'in_progress'"
            ),
            purge: format!(
                "DELETE FROM {t} WHERE key_hash IN (\
                   SELECT key_hash FROM {t} WHERE {purgeable} \
                   ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) \
                 AND {purgeable}"
            ),
            steps: vec![
                vec![
                    format!(
                        "CREATE TABLE IF NOT EXISTS {t} (\
                       key_hash BYTEA PRIMARY KEY, \
                       namespace TEXT NOT NULL, \
                       fingerprint BYTEA NOT NULL, \
                       state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')), \
                       token BIGINT NOT NULL, \
                       attempts INTEGER NOT NULL, \
                       created_at TIMESTAMPTZ NOT NULL, \
                       updated_at TIMESTAMPTZ NOT NULL, \
                       completed_at TIMESTAMPTZ, \
                       expires_at TIMESTAMPTZ NOT NULL, \
                       response_status INTEGER, \
                       response_body BYTEA)"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_expires_idx\" ON {t} (expires_at)"
                    ),
                    format!(
                        "CREATE INDEX IF NOT EXISTS \"{table}_reconcile_idx\" \
                     ON {t} (namespace, state, updated_at)"
                    ),
                    format!("CREATE SEQUENCE IF NOT EXISTS {seq}"),
                ],
                vec![
                    // 2: the claimer's id of an in-progress claim (`undo_claim`).
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS claim_id BYTEA"),
                ],
                // 3: the conflict mark (`mark_conflict`).
                marks.step,
                vec![
                    // 4: what wrote the record (`Record::mechanism`, `Record::key_derivation`).
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS mechanism TEXT"),
                    format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS key_derivation SMALLINT"),
                ],
                // 5: the checkpoints of a run with steps (`Record::progress`).
                vec![format!(
                    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS progress BYTEA"
                )],
                // 6: a waiter's flag (`wake_ups`): its completion or release is notified.
                vec![format!(
                    "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS waited BOOLEAN"
                )],
                // 7: no `CHECK` on `state`. PostgreSQL reads and plans a table's `CHECK`
                // constraints again in every statement that writes a row (about 8 µs a write:
                // BENCHMARKS.md, "Queue consumers"). Only this file's literals write `state`,
                // and a record in any other state is refused when read.
                vec![format!(
                    "DO $$ DECLARE c name; BEGIN \
                       FOR c IN SELECT conname FROM pg_constraint \
                         WHERE conrelid = '{t}'::regclass AND contype = 'c' AND conkey = \
                           ARRAY[(SELECT attnum FROM pg_attribute \
                             WHERE attrelid = '{t}'::regclass AND attname = 'state')] LOOP \
                         EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', '{table}', c); \
                       END LOOP; \
                     END $$"
                )],
            ],
            mark_conflict: marks.mark,
            undo: format!(
                "DELETE FROM {t} WHERE key_hash = $1 AND claim_id = $2 AND state = 'in_progress'"
            ),
            release: notifying(&format!("DELETE FROM {t} WHERE {owned}"), table),
            delete: notifying(
                &format!("DELETE FROM {t} WHERE key_hash = $1 AND token = $2"),
                table,
            ),
            get: format!("SELECT {} FROM {t} WHERE key_hash = $1", record_columns()),
            select_records: format!("SELECT {} FROM {t} WHERE TRUE", record_columns()),
        }
    }
}

/// `write` (an `UPDATE` or `DELETE` of owned rows) that also notifies the rows a waiter flagged
/// on `table`'s channel, the key as payload: one row back per row written.
fn notifying(write: &str, table: &str) -> String {
    format!(
        "WITH w AS ({write} RETURNING key_hash, waited) \
         SELECT CASE WHEN w.waited THEN pg_notify('{table}', encode(w.key_hash, 'hex')) END \
         FROM w"
    )
}
