#!/usr/bin/env bash
# Starts (or reuses) a 3-master Redis Cluster on loopback for the Redis Cluster tests.
#
#   .ci/redis-cluster.sh            # ports 7001 7002 7003
#   REDIS_CLUSTER_PORTS="7101 7102 7103" .ci/redis-cluster.sh
#
# Idempotent: a healthy cluster on those ports is left alone; missing nodes are started and the
# cluster is (re)created only if it is not formed. Nodes keep no data on disk (--save "",
# --appendonly no); their cluster config lives in $REDIS_CLUSTER_DIR (default
# /tmp/idempotency-redis-cluster). Tests read REDIS_CLUSTER_URLS (default the three ports).
set -euo pipefail

PORTS=(${REDIS_CLUSTER_PORTS:-7001 7002 7003})
DIR=${REDIS_CLUSTER_DIR:-/tmp/idempotency-redis-cluster}
mkdir -p "$DIR"

# One runner at a time (parallel test binaries may call this together).
exec 9>"$DIR/.lock"
flock -w 120 9

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
healthy() {
  local port
  for port in "${PORTS[@]}"; do
    cli "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    [ "$(cli "$port" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')" -ge "${#PORTS[@]}" ] || return 1
  done
}

if healthy; then
  echo "redis-cluster: healthy on ports ${PORTS[*]}"
  exit 0
fi

for port in "${PORTS[@]}"; do
  if ! cli "$port" ping >/dev/null 2>&1; then
    mkdir -p "$DIR/$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "$DIR/$port/nodes.conf" --cluster-node-timeout 5000 \
      --dir "$DIR/$port" --save "" --appendonly no --daemonize yes \
      --logfile "$DIR/$port/redis.log" --pidfile "$DIR/$port/redis.pid" 9>&-
  fi
done
for port in "${PORTS[@]}"; do
  for _ in $(seq 1 50); do cli "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  cli "$port" ping >/dev/null
done

if ! healthy; then
  # Not formed (fresh nodes, or a half-made cluster): start from empty nodes.
  for port in "${PORTS[@]}"; do
    cli "$port" flushall >/dev/null 2>&1 || true
    cli "$port" cluster reset hard >/dev/null
  done
  nodes=()
  for port in "${PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
fi

for _ in $(seq 1 100); do
  if healthy; then
    echo "redis-cluster: ready on ports ${PORTS[*]}"
    exit 0
  fi
  sleep 0.2
done
echo "redis-cluster: cluster did not become healthy on ports ${PORTS[*]}" >&2
exit 1
