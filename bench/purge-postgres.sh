#!/usr/bin/env bash
# Purges N expired records (default 1 000 000) from a PostgreSQL record table with the
# `idempotency` command, and times it.
#
#   bench/purge-postgres.sh                                   # archive table, batches of 500
#   bench/purge-postgres.sh --archive-file /tmp/archive.jsonl # JSON lines
#   N=50000 bench/purge-postgres.sh --batch 5000              # no archive, larger batches
#
# The table `bench_purge` has the PostgreSQL store's schema (version 2: `migrate()` of
# idempotency-core's PostgresStore writes the same), filled by one INSERT … generate_series with
# completed records that expired a day ago (a 30-byte JSON body each). Tables are dropped at
# the end. DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test); the release binary
# is built first.
set -euo pipefail

N=${N:-1000000}
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
ARGS=("$@")
if [ ${#ARGS[@]} -eq 0 ]; then ARGS=(--archive-table bench_purge_archive); fi

cargo build --release -p idempotency-cli >/dev/null
BIN=${CARGO_TARGET_DIR:-target}/release/idempotency

psql -q "$URL" <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench_purge; DROP TABLE IF EXISTS bench_purge_archive;
DROP SEQUENCE IF EXISTS bench_purge_token_seq;
CREATE TABLE bench_purge (key_hash BYTEA PRIMARY KEY, namespace TEXT NOT NULL,
  fingerprint BYTEA NOT NULL, state TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
  token BIGINT NOT NULL, attempts INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL, completed_at TIMESTAMPTZ, expires_at TIMESTAMPTZ NOT NULL,
  response_status INTEGER, response_body BYTEA, claim_id BYTEA);
CREATE INDEX bench_purge_expires_idx ON bench_purge (expires_at);
CREATE INDEX bench_purge_reconcile_idx ON bench_purge (namespace, state, updated_at);
CREATE SEQUENCE bench_purge_token_seq;
INSERT INTO bench_purge SELECT decode(md5(i::text) || md5((i + 7)::text), 'hex'), 'bench.purge',
  decode(md5('fp' || i) || md5('x' || i), 'hex'), 'completed', i, 1, now() - interval '2 days',
  now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', 200,
  convert_to('{"ok":true,"order":' || i || '}', 'UTF8'), NULL
  FROM generate_series(1, $N) i;
ANALYZE bench_purge;
SQL

echo "purging $N records: ${ARGS[*]}"
time "$BIN" purge --store "$URL" --table bench_purge --yes --json --reason benchmark "${ARGS[@]}"
psql -qAt "$URL" -c "SELECT 'left in the table: ' || count(*) FROM bench_purge"
psql -q "$URL" -c "SET client_min_messages = warning; DROP TABLE IF EXISTS bench_purge; DROP TABLE IF EXISTS bench_purge_archive; DROP SEQUENCE IF EXISTS bench_purge_token_seq"
