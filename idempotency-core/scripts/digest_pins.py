#!/usr/bin/env python3
"""The pinned digests of the core crate's tests (`storage_keys_are_stable`, `digests_are_stable`),
computed apart from the crate: its LEB128 framing written out here, hashed by the `blake3` package
(`pip install blake3`). SHA-256 is printed too: it reproduces the values pinned before 2026-12-01."""
import hashlib, blake3, json, sys
def leb(n):
    out=bytearray()
    while n>=0x80: out.append((n&0x7f)|0x80); n>>=7
    out.append(n); return bytes(out)
def framed(parts, tail=b""):
    return b"".join(leb(len(p))+p for p in parts)+tail
def storage(ns, principal, key, tag=b"record"):
    return framed([tag, ns, principal or b"", key], bytes([principal is not None]))
def field_parts(fields):
    out=[]
    for n,v in fields: out += [n,v]
    return out
def canon(v): return json.dumps(v, sort_keys=True, separators=(",",":"))
body={"trade_no": "T-1", "order_id": 1, "t": 9}
def jf(ptrs):
    out=[]
    for p in ptrs:
        k=p[1:]
        c=canon(body[k]).encode() if k in body else b"\0absent"
        out.append((p.encode(), c))
    return out
key=b"7c9e6679-7425-40de-944b-e07fc1f90ae7"
inputs=[
 ("orders", storage(b"orders", None, key)),
 ("tenant", storage(b"orders", b"tenant-7", key)),
 ("long", storage(b"n"*150, b"", b"k"*255)),
 ("token", storage(b"tokens", None, b"abc", tag=b"token")),
 ("request", framed(field_parts([(b"method",b"POST"),(b"target",b"/orders?x=1"),(b"body",b'{"amount":1}')]))),
 ("put300", framed(field_parts([(b"method",b"PUT"),(b"target",b"/p"),(b"body",bytes([5])*300)]))),
 ("json", framed(field_parts(jf(["/trade_no","/order_id","/none"])))),
]+[(f"bytes{n}", framed(field_parts([(b"bytes", bytes([1])*n)]))) for n in (127,128,200,16500)]+[
 ("many", framed(field_parts([(b"field", bytes([a])*(a*3)) for a in range(40)])))]
for name,data in inputs:
    print(f"{name:8} sha256 {hashlib.sha256(data).hexdigest()}  blake3 {blake3.blake3(data).hexdigest()}")
