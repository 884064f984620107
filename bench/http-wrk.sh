#!/usr/bin/env bash
# HTTP layer under load from a separate process: wrk (Debian package `wrk`) against the release
# `payments` binary, with the layer and without it (IDEMPOTENCY_LAYER=off), on loopback.
#
#   bench/http-wrk.sh [seconds=5] [rounds=3] [connections=64] [threads=2]
#   PIN=1 bench/http-wrk.sh ...   server on CPU 1, wrk on CPU 0 (one thread): the server alone
#                                  on its core, so the ratio is that of server CPU per request
#   STORE=redis|postgres|mysql|sqlite bench/http-wrk.sh ...   the service on that backend (see
#                                  examples/axum-payments/src/config.rs: Redis keeps the records and
#                                  orders stay in memory; the SQL backends keep both)
#   BINARY=path bench/http-wrk.sh ...  that `payments` binary, not built here (to compare a
#                                  build of another commit in the same conditions)
#   SCENARIOS="new-keys replay" bench/http-wrk.sh ...  only these scenarios
#   REFERENCE=1 bench/http-wrk.sh ...  new keys also through the benchmark reference
#                                  (IDEMPOTENCY_LAYER=reference, examples/axum-payments/src/reference.rs):
#                                  the least a layer replaying stored responses does, in the same rounds
#
# Scenarios: new-keys (POST /orders, new key each request), replay (POST /orders over 64 keys
# created first), callback-replay (the duplicate callback of an order already PAID). Each round
# restarts the server and alternates bare and layer; the median requests/s of the rounds and
# the ratio layer / bare are printed. Any non-2xx answer fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5} rounds=${2:-3} connections=${3:-64} threads=${4:-2}
server_cpu=() client_cpu=()
if [ "${PIN:-0}" = 1 ]; then server_cpu=(taskset -c 1) client_cpu=(taskset -c 0) threads=1; fi
port=${PORT:-3917}
addr=127.0.0.1:$port
url=http://$addr
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
store=${STORE:-memory}
features=()
[ "$store" != memory ] && features=(--features "$store")
binary=${BINARY:-}
if [ -z "$binary" ]; then
  cargo build --release -q -p axum-payments --bin payments "${features[@]}"
  binary=${CARGO_TARGET_DIR:-target}/release/payments
fi

server=
stop() { [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=; }
trap stop EXIT

start() { # $1 = on|off
  ADDR=$addr IDEMPOTENCY_STORE=$store IDEMPOTENCY_LAYER=$1 RUST_LOG=warn "${server_cpu[@]}" "$binary" >/dev/null &
  server=$!
  for _ in $(seq 100); do curl -s -o /dev/null "$url/orders/0" && return; sleep 0.05; done
  echo "payments did not start" >&2; exit 1
}

post() { # path key body -> response body
  curl -sf -X POST "$url$1" -H 'Content-Type: application/json' -H 'Authorization: Bearer bench' ${2:+-H "Idempotency-Key: $2"} -d "$3"
}

prepare() { # scenario -> wrk script arguments
  case $1 in
    new-keys) echo "$RANDOM" ;;
    replay) for k in $(seq 64); do post /orders "wrk-replay-$k" '{"user_id": 7, "amount_cents": 1299}' >/dev/null; done; echo 64 ;;
    callback-replay)
      order=$(post /orders wrk-order '{"user_id": 7, "amount_cents": 1299}' | sed -E 's/.*"order_id": ?([0-9]+).*/\1/')
      post /payments/callback "" "{\"trade_no\": \"T-$order\", \"order_id\": $order}" >/dev/null
      echo "$order" ;;
  esac
}

script() { case $1 in new-keys) echo new_keys ;; replay) echo replay ;; *) echo callback ;; esac; }

run() { # scenario layer(on|off|reference) -> requests/s
  start "$2"
  args=$(prepare "$1")
  out=$("${client_cpu[@]}" wrk -t"$threads" -c"$connections" -d"${seconds}s" -s "bench/wrk/$(script "$1").lua" "$url" -- $args)
  stop
  if grep -q "Non-2xx" <<<"$out"; then echo "$out" >&2; echo "non-2xx answers in $1 ($2)" >&2; exit 1; fi
  awk '/Requests\/sec/ {print $2}' <<<"$out"
}

median() { tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "store $store, wrk -t$threads -c$connections, ${seconds}s x $rounds rounds${server_cpu:+, pinned (server CPU 1, wrk CPU 0)}, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for scenario in ${SCENARIOS:-new-keys replay callback-replay}; do
  bare=() layer=() reference=()
  with_reference=$([ "${REFERENCE:-0}" = 1 ] && [ "$scenario" = new-keys ] && echo 1 || true)
  for _ in $(seq "$rounds"); do
    bare+=("$(run "$scenario" off)")
    layer+=("$(run "$scenario" on)")
    [ -n "$with_reference" ] && reference+=("$(run "$scenario" reference)")
  done
  b=$(echo "${bare[@]}" | median) l=$(echo "${layer[@]}" | median)
  if [ -n "$with_reference" ]; then
    r=$(echo "${reference[@]}" | median)
    printf '%-16s bare %10.0f req/s   reference %6.0f req/s   ratio %.3f   (rounds: reference %s)\n' \
      "$scenario" "$b" "$r" "$(echo "$r / $b" | bc -l)" "${reference[*]}"
  fi
  printf '%-16s bare %10.0f req/s   layer %10.0f req/s   ratio %.3f   (rounds: bare %s; layer %s)\n' \
    "$scenario" "$b" "$l" "$(echo "$l / $b" | bc -l)" "${bare[*]}" "${layer[*]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
