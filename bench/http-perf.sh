#!/usr/bin/env bash
# Where a request's server CPU time goes, in real time: perf samples the `payments` server
# (software clock, so it works in guests without performance counters) while wrk drives new keys,
# and the samples are split per request into the kernel, glibc's allocator, memcpy/memmove,
# BLAKE3, the layer and its maps, and the rest of user space. Unlike callgrind's counts, this
# includes cache and TLB misses, and the kernel.
#
#   bench/http-perf.sh [seconds=4] [mode...]   modes: off (bare) reference on; default all three
#   BINARY=path bench/http-perf.sh ...           that `payments` binary, not built here
#   TOP=20 bench/http-perf.sh ...                also the symbols each mode adds most over the first
#
# The server runs on CPU 1, wrk (one thread, 64 connections) on CPU 0, after a 3-s warm-up on a
# fresh server. Needs perf (Debian: linux-perf) and permission to sample (perf_event_paranoid).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-4}
shift || true
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(off reference on)
for tool in perf wrk python3; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 2; }
done
binary=${BINARY:-}
if [ -z "$binary" ]; then
  cargo build --release -q -p axum-payments --bin payments
  binary=${CARGO_TARGET_DIR:-target}/release/payments
fi
work=$(mktemp -d /tmp/idempotency-perf.XXXXXX)
port=${PORT:-3953} url=http://127.0.0.1:${PORT:-3953}
server=
stop() { if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi; server=; }
trap 'stop; rm -rf "$work"' EXIT

for mode in "${modes[@]}"; do
  ADDR=127.0.0.1:$port IDEMPOTENCY_LAYER=$mode RUST_LOG=warn taskset -c 1 "$binary" >/dev/null &
  server=$!
  for _ in $(seq 100); do curl -s -o /dev/null "$url/orders/0" && break; sleep 0.05; done
  taskset -c 0 wrk -t1 -c64 -d3s -s bench/wrk/new_keys.lua "$url" -- 1 >/dev/null
  perf record -q -e cpu-clock -F 10000 -p "$server" -o "$work/$mode.data" -- sleep "$seconds" \
    >/dev/null 2>&1 &
  recorder=$!
  taskset -c 0 wrk -t1 -c64 -d"${seconds}s" -s bench/wrk/new_keys.lua "$url" -- 2 >"$work/$mode.wrk"
  wait "$recorder"
  stop
  perf report -i "$work/$mode.data" -n --sort dso,sym --stdio 2>/dev/null |
    awk -F'\t' 'NF' | grep '%' >"$work/$mode.samples"
  awk '/requests in/ {print $1}' "$work/$mode.wrk" >"$work/$mode.requests"
done
python3 bench/perf_split.py "$work" "${TOP:-0}" "${modes[@]}"
