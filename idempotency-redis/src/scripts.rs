//! The Lua scripts: the steps a native command cannot do atomically on Redis 7.0, each one
//! round trip (`EVALSHA`, loaded once).
//!
//! A fresh claim, a replay and a claim of a live lease are one native `SET ... NX GET`, or a
//! `GET` for a key the store saw completed (see [`super::store`]); Redis 7.0 has no
//! compare-and-set, so complete, release, touch and the authoritative claim (a lease at or near
//! its end) are scripts. Every script touches only its record key (and the claim, release,
//! delete and checkpoint its checkpoints' key, which has the same hash tag), so it runs on one
//! Cluster node, and each is kept to one `GET` and at most one write (the checkpoint: two): no
//! `TIME` (the client sends the informational timestamps, the key's TTL is the only clock that
//! decides anything), no `struct.pack` of fields the client can pack itself.
//!
//! A record is one packed string (see [`super::codec`] for the layout): an 81-byte header of
//! big-endian integers and the raw fingerprint, then the namespace, then the outcome body as raw
//! bytes. An in-progress record ends with its namespace, so `string.sub(v, 80)` is its
//! namespace length and namespace. Lua numbers are doubles: integers are exact up to 2^53, so
//! fencing tokens (microseconds, about 1.8e15 today) stay exact until the year 2255.

/// The owner check shared by complete, release and touch: the record is in progress and its
/// token (8 raw bytes at offset 33) is `ARGV[1]`.
macro_rules! owned {
    () => {
        "local v = redis.call('GET', KEYS[1])\n\
         if not v or string.byte(v, 1) ~= 112 or string.sub(v, 34, 41) ~= ARGV[1] then\n\
           return 0\n\
         end\n"
    };
}

/// The authoritative claim, run when the native `SET ... NX GET` found an in-progress record
/// whose lease is at or near its end by the client's clock.
///
/// `KEYS[1]` record, `KEYS[2]` its checkpoints ([`CHECKPOINT`]). `ARGV`: fingerprint (32
/// bytes), candidate token (decimal, the client's next token), the new record's bytes from
/// offset 53 on (updated, lease end, grace, status 0, namespace length, namespace), PX ms
/// (lease + grace).
///
/// The lease of an in-progress record ends `grace` before its key expires, so the time left is
/// `PTTL - grace` (grace at offset 69): the server's own TTL decides, never a client clock. An
/// ended lease is taken over with exactly the candidate token, which the caller chose greater
/// than the crashed owner's it saw, so that it can name its claim should the answer not come
/// (`undo_claim`); an owner newer than the candidate is reported in flight. The record may
/// have changed since the `SET` (completed, released, taken over), so every state is handled
/// again here.
///
/// Returns `{1, token, attempt, took_over}` (acquired), `{2, lease_remaining_ms}` (in progress),
/// `{3, record}` (completed: replay the record's outcome), or `{4}` (mismatch).
pub(super) const CLAIM: &str = r#"
local v = redis.call('GET', KEYS[1])
local fp = ARGV[1]
local token, attempt, took_over, created = tonumber(ARGV[2]), 1, 0, string.sub(ARGV[3], 1, 8)
if v then
  local same = string.sub(v, 2, 33) == fp
  if string.byte(v, 1) == 99 then -- 'c': live while its key exists (native TTL)
    if not same then return {4} end
    return {3, v}
  end
  local left = redis.call('PTTL', KEYS[1]) - struct.unpack('>I8', v, 70)
  if left > 0 then
    if not same then return {4} end
    return {2, left}
  end
  local old, attempts = struct.unpack('>I8I4', v, 34)
  -- The caller chose a token past the one it saw; a newer owner came since: still in flight.
  if old >= token then return {2, 0} end
  -- A run's checkpoints (KEYS[2], stamped with the record's created time) wait for its own
  -- payload: another one is a mismatch, not a takeover.
  if not same and redis.call('GETRANGE', KEYS[2], 0, 7) == string.sub(v, 46, 53) then
    return {4}
  end
  attempt, took_over, created = attempts + 1, 1, string.sub(v, 46, 53)
end
redis.call('SET', KEYS[1], 'p' .. fp .. struct.pack('>I8I4', token, attempt) .. created .. ARGV[3],
  'PX', ARGV[4])
return {1, token, attempt, took_over}
"#;

/// `KEYS[1]` record. `ARGV`: token (8 bytes), the completed fields (updated, expires, completed
/// at, status: 26 bytes), body, ttl ms, the publish command (`PUBLISH`, or `SPUBLISH` on a
/// Cluster). Returns 1, or 0 if the token is stale.
///
/// Publishes on the record key's channel: the waiters of other processes read the record at
/// once (see [`super::wake_ups`]).
pub(super) const COMPLETE: &str = concat!(
    owned!(),
    "redis.call('SET', KEYS[1], 'c' .. string.sub(v, 2, 53) .. ARGV[2] .. string.sub(v, 80) .. ARGV[3],\n\
       'PX', ARGV[4])\n\
     redis.call(ARGV[5], KEYS[1], '')\n\
     return 1\n"
);

/// `KEYS[1]` record. `ARGV`: fingerprint (32 bytes), then as [`COMPLETE`]'s: the completed
/// fields (26 bytes), body, ttl ms, the publish command. Completes the record if it is in
/// progress with that fingerprint, whatever its token (`Store::settle`: a claim left pending,
/// whose work the record of truth says committed), and publishes as [`COMPLETE`] does.
/// Returns 1, or 0 if it is absent, completed or of another fingerprint.
pub(super) const SETTLE: &str = "local v = redis.call('GET', KEYS[1])\n\
     if not v or string.byte(v, 1) ~= 112 or string.sub(v, 2, 33) ~= ARGV[1] then\n\
       return 0\n\
     end\n\
     redis.call('SET', KEYS[1], 'c' .. string.sub(v, 2, 53) .. ARGV[2] .. string.sub(v, 80) .. ARGV[3],\n\
       'PX', ARGV[4])\n\
     redis.call(ARGV[5], KEYS[1], '')\n\
     return 1\n";

/// `KEYS[1]` record, `KEYS[2]` its checkpoints ([`CHECKPOINT`]). `ARGV`: token (8 bytes), the
/// publish command (as [`COMPLETE`]'s). Returns 1, or 0 if the token is stale.
///
/// The record and its checkpoints are simply deleted (a claim of the key in the same
/// millisecond would otherwise read them as its own): no fence key is left behind. The
/// releasing process pushes its token clock past the released token (see
/// [`super::fencing`]), so its own later tokens are greater; other processes order theirs by
/// their clocks. Publishes as [`COMPLETE`] does: the waiters claim the key.
pub(super) const RELEASE: &str = concat!(
    owned!(),
    "redis.call('DEL', KEYS[1], KEYS[2])\nredis.call(ARGV[2], KEYS[1], '')\nreturn 1\n"
);

/// The lease renewal shared by touch and checkpoint: the record's updated, lease end and grace
/// fields replaced by `ARGV[2]`, its key's expiry set to `ARGV[3]` ms.
macro_rules! renew {
    () => {
        "redis.call('SET', KEYS[1], string.sub(v, 1, 53) .. ARGV[2] .. string.sub(v, 78), 'PX', ARGV[3])\n"
    };
}

/// `KEYS[1]` record. `ARGV`: token (8 bytes), updated, lease end and grace (24 bytes), PX ms
/// (lease + grace). Returns 1, or 0 if the token is stale.
pub(super) const TOUCH: &str = concat!(owned!(), renew!(), "return 1\n");

/// `KEYS[1]` record, `KEYS[2]` its checkpoints (`<record key>:p`, the same hash tag). `ARGV`:
/// as [`TOUCH`]'s, then the run's progress (`Progress` JSON). Renews the lease as [`TOUCH`]
/// does and writes the progress after the record's created time (8 bytes), with the record's
/// expiry. A takeover keeps the created time, so the checkpoints stay the run's; a new record
/// of the key (after a release, a completion's expiry) has another, so stale checkpoints are
/// never read as its own. Returns 1, or 0 if the token is stale.
pub(super) const CHECKPOINT: &str = concat!(
    owned!(),
    renew!(),
    "redis.call('SET', KEYS[2], string.sub(v, 46, 53) .. ARGV[4], 'PX', ARGV[3])\n\
     return 1\n"
);

/// `KEYS[1]` record, `KEYS[2]` its checkpoints. `ARGV`: token (8 bytes), the publish command
/// (as [`COMPLETE`]'s). Deletes both, in any state, if the record's token is `ARGV[1]` (an
/// operator's fenced delete), and publishes as [`RELEASE`] does: the waiters claim the key.
/// Returns 1, or 0 if absent or another token.
pub(super) const DELETE: &str = "local v = redis.call('GET', KEYS[1])\n\
     if not v or string.sub(v, 34, 41) ~= ARGV[1] then\n\
       return 0\n\
     end\n\
     redis.call('DEL', KEYS[1], KEYS[2])\n\
     redis.call(ARGV[2], KEYS[1], '')\n\
     return 1\n";

/// `KEYS[1]` record. `ARGV`: now (Unix ms, 8 bytes). Counts one more conflict on the record
/// (its conflict mark after the namespace, added with its flag in the namespace length if
/// absent), the last one now; every other byte and the key's TTL stay (`KEEPTTL`). Returns 1,
/// or 0 if there is no record.
pub(super) const MARK_CONFLICT: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local length = struct.unpack('>I2', v, 80)
local n = length % 32768
local rest, count = 82 + n, 0
if length >= 32768 then
  count = struct.unpack('>I4', v, 82 + n)
  rest = rest + 12
end
if count < 4294967295 then count = count + 1 end
redis.call('SET', KEYS[1], string.sub(v, 1, 79) .. struct.pack('>I2', n + 32768) ..
  string.sub(v, 82, 81 + n) .. struct.pack('>I4', count) .. ARGV[1] .. string.sub(v, rest),
  'KEEPTTL')
return 1
"#;
