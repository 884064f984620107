#!/usr/bin/env bash
# Starts Valkey 8.1 on 127.0.0.1:7379 (VALKEY_PORT), for the Redis store's native
# compare-and-set (`SET … IFEQ`, which Redis 7 lacks). Debian bookworm ships no Valkey, so this
# fetches trixie's packages (valkey 8.1.1 and the libraries it needs, glibc 2.41 among them)
# from the Debian mirror into VALKEY_DIR (default /var/tmp/idempotency-valkey, reused across
# runs), unpacks them there and runs the server through trixie's own dynamic loader: nothing is
# installed and the system's libraries are untouched.
set -euo pipefail
port=${VALKEY_PORT:-7379}
dir=${VALKEY_DIR:-/var/tmp/idempotency-valkey}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=(valkey-server valkey-tools libc6 libssl3t64 libatomic1 libjemalloc2 liblzf1 libsystemd0
  libcap2 libgcc-s1 libzstd1 liblz4-1 liblzma5 libgcrypt20 libgpg-error0)

(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { echo "valkey: already up on port $port"; exit 0; }
libs=$dir/root/usr/lib/x86_64-linux-gnu
if [ ! -x "$dir/root/usr/bin/valkey-server" ]; then
  echo "valkey: fetching Debian trixie's valkey 8.1 into $dir"
  mkdir -p "$dir/debs"
  curl -fsS "$mirror/dists/trixie/main/binary-amd64/Packages.xz" | xz -dc >"$dir/Packages"
  for package in "${packages[@]}"; do
    file=$(awk -v p="Package: $package" '$0 == p {found = 1} found && /^Filename:/ {print $2; exit}' "$dir/Packages")
    [ -n "$file" ] || { echo "valkey: $package is not in trixie" >&2; exit 1; }
    curl -fsS -o "$dir/debs/${file##*/}" "$mirror/$file"
  done
  rm -rf "$dir/root"
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
fi
"$libs/ld-linux-x86-64.so.2" --library-path "$libs" "$dir/root/usr/bin/valkey-server" \
  --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
  --pidfile "$dir/valkey-$port.pid" --logfile "$dir/valkey-$port.log"
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { echo "valkey: up on port $port"; exit 0; }
  sleep 0.1
done
echo "valkey: did not start (see $dir/valkey-$port.log)" >&2
exit 1
