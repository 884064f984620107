#!/usr/bin/env python3
"""Writes N records of one namespace in the Redis store's format (idempotency-core
src/redis/codec.rs): all completed but 10 abandoned, under `<prefix>{<hex>}`, each sent by
`redis-cli --pipe` to the node (of the ports given) that serves its slot.

    bench/redis-ops-fill.py N PREFIX NAMESPACE PORT [PORT...]
"""
import os
import struct
import subprocess
import sys
import time


def crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def slot_owners(ports):
    """slot -> port, from CLUSTER SLOTS of the first port (None on a single server)."""
    if len(ports) == 1:
        return None
    out = subprocess.run(["redis-cli", "-p", ports[0], "cluster", "nodes"],
                         capture_output=True, text=True, check=True).stdout
    owners = {}
    for line in out.splitlines():
        fields = line.split()
        if "master" not in fields[2]:
            continue
        port = fields[1].split("@")[0].rsplit(":", 1)[1]
        for part in fields[8:]:
            if part.startswith("["):
                continue
            low, _, high = part.partition("-")
            for slot in range(int(low), int(high or low) + 1):
                owners[slot] = port
    return owners


def resp(*args: bytes) -> bytes:
    out = b"*%d\r\n" % len(args)
    for arg in args:
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


def record(state, namespace, now, abandoned):
    fingerprint = os.urandom(32)
    token, attempts = 1, 1
    created = updated = now - 120_000
    if abandoned:
        lease_end, grace, status, body = now - 60_000, 3_600_000, 0, b""
        ttl = 3_000_000
    else:
        lease_end, grace, status, body = now + 86_400_000, now - 119_000, 200, b'{"ok":true}'
        ttl = 86_400_000
    ns = namespace.encode()
    packed = (state + fingerprint + struct.pack(">QIQQQQHH", token, attempts, created, updated,
                                                lease_end, grace, status, len(ns)) + ns + body)
    return packed, ttl


def main():
    n, prefix, namespace, ports = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    owners = slot_owners(ports)
    now = int(time.time() * 1000)
    streams = {port: bytearray() for port in ports}
    for i in range(n):
        abandoned = i < 10
        hexkey = os.urandom(32).hex()
        value, ttl = record(b"p" if abandoned else b"c", namespace, now, abandoned)
        port = owners[crc16(hexkey.encode()) % 16384] if owners else ports[0]
        key = f"{prefix}{{{hexkey}}}".encode()
        streams[port] += resp(b"SET", key, value, b"PX", str(ttl).encode())
    for port, stream in streams.items():
        subprocess.run(["redis-cli", "-p", port, "--pipe"], input=bytes(stream), check=True,
                       capture_output=True)


if __name__ == "__main__":
    main()
