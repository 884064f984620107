//! The Lua scripts: one per store step, each one round trip (`EVALSHA`, loaded once).
//!
//! Every script touches only keys that share the record's hash tag, so it runs on one Cluster
//! node. Times come from the server (`TIME`), never from the caller's clock. Redis 7 replicates
//! script effects, so `TIME` inside a writing script is allowed.
//!
//! A record is a hash with short fields:
//! `s` state (`p` in progress, `c` completed), `f` fingerprint (32 raw bytes), `n` namespace,
//! `t` fencing token, `a` attempts, `c` created, `u` updated, `d` completed, `e` lease end (in
//! progress) or expiry (completed), `o` status, `b` body (raw bytes). Times are Unix
//! milliseconds, numbers decimal.
//!
//! Lua numbers are doubles: integers are exact up to 2^53, so fencing tokens (server
//! microseconds, about 1.8e15 today) stay exact until the year 2255. Numbers are written with
//! `%.0f` (plain digits) and tokens compared as those strings.

/// Shared prologue: server time in microseconds and milliseconds.
macro_rules! now {
    () => {
        "local now_t = redis.call('TIME')\n\
         local now_us = tonumber(now_t[1]) * 1000000 + tonumber(now_t[2])\n\
         local now_ms = math.floor(now_us / 1000)\n\
         local function num(x) return string.format('%.0f', x) end\n"
    };
}

/// `KEYS[1]` record, `KEYS[2]` fence (last token of a deleted record, kept only while it is
/// ahead of the clock). `ARGV`: fingerprint, namespace, lease ms, abandoned-record grace ms.
///
/// Returns `{1, token, attempt, took_over}` (acquired), `{2, lease_remaining_ms}` (in progress),
/// `{3, status, body}` (completed, replay), or `{4}` (mismatch).
pub(super) const CLAIM: &str = r#"
local fp = ARGV[1]
local r = redis.call('HMGET', KEYS[1], 's', 'f', 'o', 'b', 'e', 't', 'a', 'c')
-- A completed record is live while its key exists (native TTL): a replay needs no clock.
if r[1] == 'c' then
  if r[2] ~= fp then return {4} end
  return {3, tonumber(r[3]), r[4]}
end
local now_t = redis.call('TIME')
local now_us = tonumber(now_t[1]) * 1000000 + tonumber(now_t[2])
local now_ms = math.floor(now_us / 1000)
local lease_ms, grace_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local floor, attempt, took_over, created = 0, 1, 0, now_ms
if r[1] then
  local ends = tonumber(r[5])
  if ends > now_ms then
    if r[2] ~= fp then return {4} end
    return {2, ends - now_ms}
  end
  floor, attempt, took_over, created = tonumber(r[6]), tonumber(r[7]) + 1, 1, tonumber(r[8])
else
  local last = redis.call('GET', KEYS[2])
  if last then floor = tonumber(last) end
end
local token = math.max(floor + 1, now_us)
local function num(x) return string.format('%.0f', x) end
redis.call('HSET', KEYS[1], 's', 'p', 'f', fp, 'n', ARGV[2], 't', num(token), 'a', num(attempt),
  'c', num(created), 'u', num(now_ms), 'e', num(now_ms + lease_ms))
redis.call('PEXPIRE', KEYS[1], lease_ms + grace_ms)
return {1, token, attempt, took_over}
"#;

/// `KEYS[1]` record. `ARGV`: token, status, body, ttl ms. Returns 1, or 0 if the token is stale.
pub(super) const COMPLETE: &str = concat!(
    now!(),
    r#"
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= 'p' or r[2] ~= ARGV[1] then return 0 end
local ttl_ms = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 's', 'c', 'o', ARGV[2], 'b', ARGV[3], 'd', num(now_ms),
  'u', num(now_ms), 'e', num(now_ms + ttl_ms))
redis.call('PEXPIRE', KEYS[1], ttl_ms)
return 1
"#
);

/// `KEYS[1]` record, `KEYS[2]` fence. `ARGV`: token. Returns 1, or 0 if the token is stale.
///
/// Fencing tokens are `max(previous + 1, server µs)`. A deleted record forgets its token, so
/// when that token is still ahead of the clock (several owners within one microsecond) it is
/// kept in the fence key until the clock has passed it.
pub(super) const RELEASE: &str = concat!(
    now!(),
    r#"
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= 'p' or r[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local token = tonumber(r[2])
if token >= now_us then
  redis.call('SET', KEYS[2], r[2], 'PX', math.floor((token - now_us) / 1000) + 2)
end
return 1
"#
);

/// `KEYS[1]` record. `ARGV`: token, lease ms, grace ms. Returns 1, or 0 if the token is stale.
pub(super) const TOUCH: &str = concat!(
    now!(),
    r#"
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= 'p' or r[2] ~= ARGV[1] then return 0 end
local lease_ms = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'e', num(now_ms + lease_ms), 'u', num(now_ms))
redis.call('PEXPIRE', KEYS[1], lease_ms + tonumber(ARGV[3]))
return 1
"#
);

/// `KEYS[1]` token key. Deletes the token and returns 1 if it was there and unexpired, else 0.
/// One atomic compare-and-delete: two consumers can never both see it.
pub(super) const CONSUME_TOKEN: &str = concat!(
    now!(),
    r#"
local expires = redis.call('GET', KEYS[1])
if not expires then return 0 end
redis.call('DEL', KEYS[1])
if tonumber(expires) <= now_ms then return 0 end
return 1
"#
);
