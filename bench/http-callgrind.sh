#!/usr/bin/env bash
# Instructions per request of the `payments` service, bare and with the layer, counted by
# callgrind: repeatable on a noisy VM, where wall-clock ratios drift by 10-30 % (see
# BENCHMARKS.md). The server runs under valgrind; wrk (one thread, 8 connections) drives it.
#
#   bench/http-callgrind.sh [seconds=20] [scenario...]   scenarios: new-keys replay callback-replay
#   TOP=25 bench/http-callgrind.sh ...                    also the functions whose self cost the
#                                                         layer changes most, per request
#   BINARY=path bench/http-callgrind.sh ...               another server with the payments
#                                                         binary's ADDR and IDEMPOTENCY_LAYER=on|off
#                                                         (the peer: bench/peer/README.md)
#   KEEP=dir bench/http-callgrind.sh ...                  keeps the callgrind files in dir (for
#                                                         callgrind_annotate --inclusive=yes)
#   REFERENCE=1 bench/http-callgrind.sh ...               new keys also through the benchmark
#                                                         reference (IDEMPOTENCY_LAYER=reference)
#   CACHE=1 bench/http-callgrind.sh ...                   also simulates the caches and prints
#                                                         L1i, L1d and last-level misses per
#                                                         request (user space only: the kernel's
#                                                         own evictions are not simulated).
#                                                         Geometry: CACHE_GEOMETRY, by default
#                                                         64 KiB 4-way L1i, 32 KiB 8-way L1d,
#                                                         8 MiB 16-way LL (AMD EPYC 7001's)
#
# The `hash` column counts the functions named after the hash of storage keys and fingerprints
# (BLAKE3; SHA-256 before 2026-12-01). BLAKE3's glue is inlined into its callers and counted in
# their rows: compare totals across builds.
# Counters are zeroed after a 10-s warm-up and dumped after the measured window; requests are
# those wrk completed in it (at most 8 more were in flight at either edge).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift || true
scenarios=("$@")
[ ${#scenarios[@]} -eq 0 ] && scenarios=(new-keys replay callback-replay)
for tool in valgrind callgrind_control wrk python3; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 2; }
done
# Line tables, so that inlined code is named after its function.
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
if [ -n "${BINARY:-}" ]; then
  binary=$BINARY
else
  cargo build --release -q -p axum-payments --bin payments
  binary=${CARGO_TARGET_DIR:-target}/release/payments
fi
work=$(mktemp -d /tmp/idempotency-callgrind.XXXXXX)
port=${PORT:-3931} url=http://127.0.0.1:${PORT:-3931}
server=
stop() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi
  server=
}
trap 'stop; if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && find "$work" -name '*.on*' -o -name '*.off*' -o -name '*.reference*' | xargs cp -t "$KEEP"; fi; rm -rf "$work"' EXIT

post() { curl -sf -X POST "$url$1" -H 'Content-Type: application/json' -H 'Authorization: Bearer bench' ${2:+-H "Idempotency-Key: $2"} -d "$3"; }

cache=()
if [ "${CACHE:-0}" = 1 ]; then
  read -r -a cache <<<"--cache-sim=yes ${CACHE_GEOMETRY:---I1=65536,4,64 --D1=32768,8,64 --LL=8388608,16,64}"
fi

measure() { # scenario on|off -> "requests instructions hash-instructions [l1i l1d ll]"
  ADDR=127.0.0.1:$port IDEMPOTENCY_LAYER=$2 RUST_LOG=warn valgrind --tool=callgrind "${cache[@]}" \
    --callgrind-out-file="$work/$1.$2" "$binary" >"$work/server.log" 2>"$work/valgrind.log" &
  server=$!
  for _ in $(seq 600); do curl -s -o /dev/null "$url/orders/0" && break; sleep 0.1; done
  local script args warm
  case $1 in
    new-keys) script=new_keys args=2 warm=1 ;;
    replay) script=replay args=64 warm=64
      for k in $(seq 64); do post /orders "wrk-replay-$k" '{"user_id": 7, "amount_cents": 1299}' >/dev/null; done ;;
    callback-replay) script=callback
      args=$(post /orders wrk-order '{"user_id": 7, "amount_cents": 1299}' | sed -E 's/.*"order_id": ?([0-9]+).*/\1/')
      post /payments/callback "" "{\"trade_no\": \"T-$args\", \"order_id\": $args}" >/dev/null
      warm=$args ;;
  esac
  wrk -t1 -c8 -d10s -s "bench/wrk/$script.lua" "$url" -- "$warm" >/dev/null
  callgrind_control -z "$server" >/dev/null 2>&1
  wrk -t1 -c8 -d"${seconds}s" -s "bench/wrk/$script.lua" "$url" -- "$args" >"$work/wrk.txt"
  callgrind_control -d "$server" >/dev/null 2>&1
  stop
  if grep -q "Non-2xx" "$work/wrk.txt"; then cat "$work/wrk.txt" >&2; exit 1; fi
  local requests
  requests=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
  # Part 1 is the dump `-d` took: the measured window.
  python3 bench/callgrind_self.py "$work/$1.$2.1" "$requests" "$work/$1.$2.self"
}

header=(scenario mode "Ir/request" "w/o hash" hash)
[ ${#cache[@]} -gt 0 ] && header+=(L1i-miss L1d-miss LL-miss)
printf '%-16s %8s %14s %14s %9s' "${header[@]:0:5}"
[ ${#cache[@]} -gt 0 ] && printf ' %9s %9s %9s' "${header[@]:5}"
echo
for scenario in "${scenarios[@]}"; do
  modes=(off on)
  [ "${REFERENCE:-0}" = 1 ] && [ "$scenario" = new-keys ] && modes+=(reference)
  for mode in "${modes[@]}"; do
    read -r requests total hashing misses < <(measure "$scenario" "$mode")
    case $mode in off) label=bare ;; on) label=layer ;; *) label=$mode ;; esac
    printf '%-16s %8s %14d %14d %9d' "$scenario" "$label" \
      "$total" "$((total - hashing))" "$hashing"
    [ -n "${misses:-}" ] && printf ' %9d %9d %9d' $misses
    printf '   (%d requests)\n' "$requests"
  done
  if [ -n "${TOP:-}" ]; then
    python3 bench/callgrind_self.py --diff "$work/$scenario.on.self" "$work/$scenario.off.self" "$TOP"
  fi
done
