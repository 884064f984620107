#!/usr/bin/env bash
# Instructions per request of the layer's hot path (memory store, header key, in process: the
# `spans` bench of idempotency-tower), with no subscriber and with a `fmt` subscriber filtering
# at INFO and at DEBUG (the level of the `idempotency.guard` span), counted by callgrind over the measured
# requests only (`--toggle-collect`), for one or more builds of the bench in the same run.
#
#   bench/spans-callgrind.sh [n=20000] [binary...]    default binary: this tree's, built here
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
shift || true
binaries=("$@")
if [ ${#binaries[@]} -eq 0 ]; then
  binary=$(cargo bench -p idempotency-tower --bench spans --no-run 2>&1 |
    sed -nE 's/.*Executable benches\/spans.rs \((.*)\)/\1/p')
  binaries=("$binary")
fi
work=$(mktemp -d /tmp/idempotency-spans.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf '%-40s %-6s %-9s %12s\n' build subscriber scenario "Ir/request"
for binary in "${binaries[@]}"; do
  for scenario in new-keys replay; do
    for subscriber in none info debug; do
      out="$work/out"
      valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect='spans::measured_requests' --callgrind-out-file="$out" \
        "$binary" "$subscriber" "$scenario" "$n" >/dev/null 2>"$work/log"
      total=$(awk '/^(summary|totals):/ {print $2; exit}' "$out")
      printf '%-40s %-6s %-9s %12d\n' "$(basename "$binary")" "$subscriber" "$scenario" $((total / n))
    done
  done
done
