#!/usr/bin/env bash
# What a queue message's dedup write costs PostgreSQL, by variant of the row (BENCHMARKS.md,
# "Queue consumers"): the business INSERT and one dedup write in a transaction, run by pgbench.
#
#   bench/record-cost.sh [ROUNDS] [SECONDS] [VARIANT...]
#
# Variants: dedup (the post-mortem's row: a text key, a plain INSERT), dedup-archived (the
# post-mortem's dedup table as it describes it: the key, a type, a status, and the time it is
# archived by, indexed), record (the record as `TxStore::record_in_tx` writes it, schema 7),
# record-check (with schema 6's CHECK on state), record-pk (the record without its two secondary
# indexes), record-pk-plain (and a plain INSERT), record-partial (the reconciliation index
# partial, in-progress records only), record-ordered (the record, its keys in insertion order as
# the queue bench's T0, T1 … are; every other variant's keys are random). Prints, per run,
# transactions per second, PostgreSQL CPU per transaction (the backends' time, read from the
# postmaster's reaped children) and WAL bytes per transaction; then the median CPU per variant
# (a busy machine slows some rounds: the median keeps them out). Needs pgbench and a local
# server (PGURL, default postgres://postgres@127.0.0.1:5432/test); tables pgx_* are created and
# dropped.
set -euo pipefail
rounds=${1:-5}
seconds=${2:-5}
shift $(($# > 2 ? 2 : $#))
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(dedup dedup-archived record record-check record-pk record-pk-plain record-partial record-ordered)
url=${PGURL:-postgres://postgres@127.0.0.1:5432/test}
dir=$(mktemp -d)
# Every table the variants write, with the business table.
tables="pgx_coupons, pgx_dedup, pgx_dedup_archived, pgx_record, pgx_record_check, pgx_record_pk, pgx_record_partial"
trap 'psql -q "$url" -c "DROP TABLE IF EXISTS $tables; DROP SEQUENCE IF EXISTS pgx_token_seq, pgx_key_seq" >/dev/null; rm -rf "$dir"' EXIT

columns="key_hash BYTEA PRIMARY KEY, namespace TEXT NOT NULL, fingerprint BYTEA NOT NULL,
  state TEXT NOT NULL, token BIGINT NOT NULL, attempts INTEGER NOT NULL,
  created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, completed_at TIMESTAMPTZ,
  expires_at TIMESTAMPTZ NOT NULL, response_status INTEGER, response_body BYTEA, claim_id BYTEA,
  conflicts INTEGER, last_conflict_at TIMESTAMPTZ, mechanism TEXT, key_derivation SMALLINT,
  progress BYTEA, waited BOOLEAN"
psql -q "$url" >/dev/null <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS $tables;
DROP SEQUENCE IF EXISTS pgx_token_seq, pgx_key_seq;
CREATE SEQUENCE pgx_token_seq;
CREATE SEQUENCE pgx_key_seq;
CREATE TABLE pgx_coupons (id BIGSERIAL PRIMARY KEY, business_key TEXT NOT NULL);
CREATE TABLE pgx_dedup (business_key TEXT PRIMARY KEY);
CREATE TABLE pgx_dedup_archived (business_key TEXT PRIMARY KEY, biz_type TEXT NOT NULL,
  status TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE INDEX ON pgx_dedup_archived (created_at);
CREATE TABLE pgx_record ($columns);
CREATE TABLE pgx_record_check ($columns, CHECK (state IN ('in_progress', 'completed')));
CREATE TABLE pgx_record_pk ($columns);
CREATE TABLE pgx_record_partial ($columns);
CREATE INDEX ON pgx_record_partial (expires_at);
CREATE INDEX ON pgx_record_partial (namespace, updated_at) WHERE state = 'in_progress';
CREATE INDEX ON pgx_record (expires_at);
CREATE INDEX ON pgx_record (namespace, state, updated_at);
CREATE INDEX ON pgx_record_check (expires_at);
CREATE INDEX ON pgx_record_check (namespace, state, updated_at);
SQL

# One transaction per message: the business INSERT, then the dedup write (as both consumers).
business="INSERT INTO pgx_coupons (business_key) VALUES ('T' || :k || '-' || :client_id);"
record() { # table, conflict clause, the key's first 16 bytes (default: random)
  echo "INSERT INTO $1 (key_hash, namespace, fingerprint, state, token, claim_id, attempts,
    created_at, updated_at, completed_at, expires_at, response_status, response_body, mechanism,
    key_derivation) VALUES (${3:-int8send(:k) || int8send(:client_id)}
    || '\\x00112233445566778899aabbccddeeff'::bytea, 'coupon-grant',
    '\\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 'completed',
    nextval('pgx_token_seq'), NULL, 1, statement_timestamp(), statement_timestamp(),
    statement_timestamp(), statement_timestamp() + 604800000000 * interval '1 microsecond', 0,
    '\\x6e756c6c'::bytea, 'consumer', 1)$2;" | tr -s ' \n' ' '
}
write() { # variant
  case $1 in
    dedup) echo "INSERT INTO pgx_dedup (business_key) VALUES ('T' || :k || '-' || :client_id);" ;;
    dedup-archived)
      echo "INSERT INTO pgx_dedup_archived (business_key, biz_type, status)
        VALUES ('T' || :k || '-' || :client_id, 'COUPON_GRANT', 'DONE');" | tr -s ' \n' ' ' ;;
    record) record pgx_record " ON CONFLICT (key_hash) DO NOTHING" ;;
    record-check) record pgx_record_check " ON CONFLICT (key_hash) DO NOTHING" ;;
    record-pk) record pgx_record_pk " ON CONFLICT (key_hash) DO NOTHING" ;;
    record-pk-plain) record pgx_record_pk "" ;;
    record-partial) record pgx_record_partial " ON CONFLICT (key_hash) DO NOTHING" ;;
    record-ordered)
      record pgx_record " ON CONFLICT (key_hash) DO NOTHING" "int8send(nextval('pgx_key_seq')) || int8send(0)" ;;
    *) echo "no variant $1" >&2; exit 2 ;;
  esac
}
# Keys drawn from 10^15 per client: a repeat, which aborts a plain INSERT's run, is out of reach.
for variant in "${variants[@]}"; do
  printf '\\set k random(1, 1000000000000000)\nBEGIN;\n%s\n%s\nCOMMIT;\n' "$business" "$(write "$variant")" \
    > "$dir/$variant.sql"
done

postmaster=$(pgrep -o -x postgres) # the oldest postgres process: the postmaster
tick=$(getconf CLK_TCK)
reaped() { awk '{print $16 + $17}' "/proc/$postmaster/stat"; }
for round in $(seq 1 "$rounds"); do
  for variant in "${variants[@]}"; do
    psql -q "$url" -c "TRUNCATE $tables; CHECKPOINT" >/dev/null
    wal0=$(psql -qAt "$url" -c "SELECT pg_current_wal_lsn()")
    cpu0=$(reaped)
    out=$(pgbench -n -M prepared -c 8 -j 2 -T "$seconds" -f "$dir/$variant.sql" "$url" 2>&1) || {
      echo "pgbench failed on $variant:" >&2; echo "$out" | tail -5 >&2; exit 1
    }
    # The backends exit after pgbench disconnects: their time is the postmaster's once reaped.
    sleep 1
    cpu1=$(reaped)
    wal=$(psql -qAt "$url" -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')")
    tx=$(echo "$out" | awk -F': ' '/actually processed/ {split($2, n, "/"); print n[1]}')
    tps=$(echo "$out" | awk '/^tps/ {printf "%.0f", $3}')
    echo "$round $variant tps=$tps cpu_us=$(( (cpu1 - cpu0) * 1000000 / tick / tx )) wal_bytes=$(( ${wal%.*} / tx ))"
  done
done | tee "$dir/runs"
echo "median PostgreSQL CPU per transaction (µs), in the order run:"
for variant in "${variants[@]}"; do
  awk -v v="$variant" '$2 == v {split($4, c, "="); print c[2]}' "$dir/runs" | sort -n |
    awk -v v="$variant" '{x[NR] = $1} END {printf "  %-16s %.0f\n", v, NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2}'
done
