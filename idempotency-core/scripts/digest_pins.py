#!/usr/bin/env python3
"""The pinned digests of the core crate's tests (`storage_keys_are_stable` in src/scope.rs,
`digests_are_stable` in src/fingerprint.rs), computed apart from the crate: its LEB128 framing
written out here, hashed by the `blake3` package (`pip install blake3`).

SHA-256 is printed beside each: it reproduces the values pinned before 2026-12-01, which checks
that the framing here is the crate's.
"""
import hashlib
import json

import blake3


def leb128(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def framed(parts, tail=b""):
    return b"".join(leb128(len(part)) + part for part in parts) + tail


def storage_key(namespace, principal, key, tag=b"record"):
    """Scope::storage_key / Scope::derive: tag, namespace, principal, key, then a principal flag."""
    return framed([tag, namespace, principal or b"", key], bytes([principal is not None]))


def fields(pairs):
    """FingerprintBuilder::field, once per (name, value)."""
    return framed([part for pair in pairs for part in pair])


def json_fields(document, pointers):
    """FingerprintBuilder::json_fields over top-level pointers: canonical JSON, or "\\0absent"."""
    canonical = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")).encode()
    return fields(
        (p.encode(), canonical(document[p[1:]]) if p[1:] in document else b"\0absent")
        for p in pointers
    )


KEY = b"7c9e6679-7425-40de-944b-e07fc1f90ae7"
INPUTS = [
    ("orders", storage_key(b"orders", None, KEY)),
    ("tenant", storage_key(b"orders", b"tenant-7", KEY)),
    ("long", storage_key(b"n" * 150, b"", b"k" * 255)),
    ("token", storage_key(b"tokens", None, b"abc", tag=b"token")),
    *[(tag.decode(), storage_key(b"orders", None, KEY, tag=tag)) for tag in (b"function", b"transaction", b"message")],
    ("request", fields([(b"method", b"POST"), (b"target", b"/orders?x=1"), (b"body", b'{"amount":1}')])),
    ("put300", fields([(b"method", b"PUT"), (b"target", b"/p"), (b"body", bytes([5]) * 300)])),
    ("json", json_fields({"trade_no": "T-1", "order_id": 1, "t": 9}, ["/trade_no", "/order_id", "/none"])),
    *[(f"bytes{n}", fields([(b"bytes", bytes([1]) * n)])) for n in (127, 128, 200, 16_500)],
    ("many", fields((b"field", bytes([a]) * (a * 3)) for a in range(40))),
]

for name, data in INPUTS:
    print(f"{name:10} sha256 {hashlib.sha256(data).hexdigest()}  blake3 {blake3.blake3(data).hexdigest()}")
