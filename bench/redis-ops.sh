#!/usr/bin/env bash
# `idempotency stats` and `idempotency stuck` over RECORDS records of one namespace (all
# completed but 10 abandoned), on one Redis server and on the Redis Cluster, in the same run.
# The records are written straight in the store's format (bench/redis-ops-fill.py, through
# `redis-cli --pipe` to the node that serves each key's slot) under their own prefix, and
# deleted afterwards.
#
#   bench/redis-ops.sh [binary=target/release/idempotency ...]   RECORDS=50000 BATCH=500 ROUNDS=3
#   REDIS_PORT=6379 REDIS_CLUSTER_PORTS="7001 7002 7003"
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-50000} batch=${BATCH:-500} rounds=${ROUNDS:-3}
single=${REDIS_PORT:-6379}
read -r -a cluster <<<"${REDIS_CLUSTER_PORTS:-7001 7002 7003}"
binaries=("$@")
if [ ${#binaries[@]} -eq 0 ]; then
  cargo build --release -q -p idempotency-cli
  binaries=("${CARGO_TARGET_DIR:-target}/release/idempotency")
fi
prefix=bench-ops: namespace=bench.ops
cluster_url=$(printf 'redis://127.0.0.1:%s,' "${cluster[@]}")
cluster_url=${cluster_url%,}

clean() {
  for port in "$single" "${cluster[@]}"; do
    # One DEL per key: a Cluster refuses a DEL of keys in several slots.
    redis-cli -p "$port" --scan --pattern "$prefix*" | sed 's/^/DEL /' | redis-cli -p "$port" >/dev/null
  done
}
trap clean EXIT
clean
python3 bench/redis-ops-fill.py "$records" "$prefix" "$namespace" "$single"
python3 bench/redis-ops-fill.py "$records" "$prefix" "$namespace" "${cluster[@]}"

printf '%-22s %-8s %-6s %10s %10s %12s\n' build store cmd "wall s" "cpu s" records
for binary in "${binaries[@]}"; do
  for store in single cluster; do
    url=redis://127.0.0.1:$single
    [ "$store" = cluster ] && url=$cluster_url
    for cmd in stats stuck; do
      for _ in $(seq "$rounds"); do
        args=("$cmd" --store "$url" --prefix "$prefix" --namespace "$namespace" --json)
        [ "$cmd" = stuck ] && args+=(--limit "$records")
        # --batch where the CLI has it.
        args+=(--batch "$batch")
        /usr/bin/time -f '%e %U %S' -o /tmp/redis-ops.time "$binary" "${args[@]}" >/tmp/redis-ops.out 2>/dev/null
        read -r wall user sys </tmp/redis-ops.time
        found=$(wc -l </tmp/redis-ops.out)
        [ "$cmd" = stats ] && found=$(grep -o '"completed":[0-9]*' /tmp/redis-ops.out | head -1 | cut -d: -f2)
        printf '%-22s %-8s %-6s %10s %10s %12s\n' "$(basename "$binary")" "$store" "$cmd" "$wall" \
          "$(echo "$user + $sys" | bc)" "$found"
      done
    done
  done
done
