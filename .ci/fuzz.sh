#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for a bounded time (FUZZ_SECONDS each, default 60) with
# cargo-fuzz on the nightly toolchain, and prints the number of runs of each. Not called from
# .ci/run: four targets x 60 s plus a sanitizer build is too long for every CI run; run it
# nightly or before a release. A crash fails the script and leaves the input in
# fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
targets="${FUZZ_TARGETS:-key_parse json_pointer_key fingerprint response_codec}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo +nightly fuzz build
for target in $targets; do
  log="$(mktemp)"
  if ! cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $target FAILED (see fuzz/artifacts/$target/)"
    exit 1
  fi
  runs="$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1)"
  cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)"
  echo "fuzz: $target ok: ${runs:-?}s, ${cov:-?}"
  rm -f "$log"
done
