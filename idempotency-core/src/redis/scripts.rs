//! The Lua scripts: one per store step, each one round trip (`EVALSHA`, loaded once).
//!
//! Every script touches only keys that share the record's hash tag, so it runs on one Cluster
//! node. Times come from the server (`TIME`), never from the caller's clock. Redis 7 replicates
//! script effects, so `TIME` inside a writing script is allowed.
//!
//! A record is one packed string (see [`super::codec`] for the layout): an 81-byte header of
//! big-endian integers and the raw fingerprint, then the namespace, then the outcome body as raw
//! bytes. A replay is a `GET` and a 33-byte comparison inside the script; the client decodes
//! the record. Lua numbers are doubles: integers are exact up to 2^53, so fencing tokens (server
//! microseconds, about 1.8e15 today) stay exact until the year 2255.

/// Shared prologue: server time in microseconds and milliseconds.
macro_rules! now {
    () => {
        "local now_t = redis.call('TIME')\n\
         local now_us = tonumber(now_t[1]) * 1000000 + tonumber(now_t[2])\n\
         local now_ms = math.floor(now_us / 1000)\n"
    };
}

/// The owner check shared by complete, release and touch: the record is in progress and its
/// token (8 raw bytes at offset 34) is `ARGV[1]`.
macro_rules! owned {
    () => {
        "local v = redis.call('GET', KEYS[1])\n\
         if not v or string.byte(v, 1) ~= 112 or string.sub(v, 34, 41) ~= ARGV[1] then\n\
           return 0\n\
         end\n"
    };
}

/// `KEYS[1]` record, `KEYS[2]` fence (last token of a deleted record, kept only while it is
/// ahead of the clock). `ARGV`: fingerprint, namespace, lease ms, abandoned-record grace ms.
///
/// Returns `{1, token, attempt, took_over}` (acquired), `{2, lease_remaining_ms}` (in progress),
/// `{3, record}` (completed: replay the record's outcome), or `{4}` (mismatch).
pub(super) const CLAIM: &str = concat!(
    r#"
local fp = ARGV[1]
local v = redis.call('GET', KEYS[1])
-- A completed record is live while its key exists (native TTL): a replay needs no clock.
if v and string.byte(v, 1) == 99 then -- 'c'
  if string.sub(v, 2, 33) ~= fp then return {4} end
  return {3, v}
end
"#,
    now!(),
    r#"
local lease_ms, grace_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local floor, attempt, took_over, created = 0, 1, 0, now_ms
if v then
  local token, attempts, created_ms, updated_ms, ends = struct.unpack('>I8I4I8I8I8', v, 34)
  if ends > now_ms then
    if string.sub(v, 2, 33) ~= fp then return {4} end
    return {2, ends - now_ms}
  end
  floor, attempt, took_over, created = token, attempts + 1, 1, created_ms
else
  local last = redis.call('GET', KEYS[2])
  if last then floor = tonumber(last) end
end
local token = math.max(floor + 1, now_us)
local ns = ARGV[2]
redis.call('SET', KEYS[1],
  struct.pack('>c1c32I8I4I8I8I8I8I2I2', 'p', fp, token, attempt, created, now_ms,
    now_ms + lease_ms, 0, 0, #ns) .. ns,
  'PX', lease_ms + grace_ms)
return {1, token, attempt, took_over}
"#
);

/// `KEYS[1]` record. `ARGV`: token (8 bytes), status, body, ttl ms. Returns 1, or 0 if the
/// token is stale.
pub(super) const COMPLETE: &str = concat!(
    owned!(),
    now!(),
    r#"
local ttl_ms = tonumber(ARGV[4])
local ns_len = struct.unpack('>I2', v, 80)
redis.call('SET', KEYS[1],
  'c' .. string.sub(v, 2, 53)
    .. struct.pack('>I8I8I8I2', now_ms, now_ms + ttl_ms, now_ms, tonumber(ARGV[2]))
    .. string.sub(v, 80, 81 + ns_len) .. ARGV[3],
  'PX', ttl_ms)
return 1
"#
);

/// `KEYS[1]` record, `KEYS[2]` fence. `ARGV`: token (8 bytes). Returns 1, or 0 if the token is
/// stale.
///
/// Fencing tokens are `max(previous + 1, server µs)`. A deleted record forgets its token, so
/// when that token is still ahead of the clock (several owners within one microsecond) it is
/// kept in the fence key until the clock has passed it.
pub(super) const RELEASE: &str = concat!(
    owned!(),
    now!(),
    r#"
redis.call('DEL', KEYS[1])
local token = struct.unpack('>I8', v, 34)
if token >= now_us then
  redis.call('SET', KEYS[2], string.format('%.0f', token),
    'PX', math.floor((token - now_us) / 1000) + 2)
end
return 1
"#
);

/// `KEYS[1]` record. `ARGV`: token (8 bytes), lease ms, grace ms. Returns 1, or 0 if the token
/// is stale.
pub(super) const TOUCH: &str = concat!(
    owned!(),
    now!(),
    r#"
local lease_ms = tonumber(ARGV[2])
redis.call('SET', KEYS[1],
  string.sub(v, 1, 53) .. struct.pack('>I8I8', now_ms, now_ms + lease_ms) .. string.sub(v, 70),
  'PX', lease_ms + tonumber(ARGV[3]))
return 1
"#
);

/// `KEYS[1]` token key. Deletes the token and returns 1 if it was there, else 0: one atomic
/// check-and-delete, so two consumers can never both see it. Expiry is the key's native TTL
/// (the server's clock alone decides, never the issuer's).
pub(super) const CONSUME_TOKEN: &str = "return redis.call('DEL', KEYS[1])";
