//! The compact binary encoding of a stored response.
//!
//! A stored response is kept in [`Outcome::body`](idempotency_core::Outcome) as
//!
//! ```text
//! version (u8 = 1) | status (u16 BE) | headers | body | trailer flag (u8) [| trailers]
//! headers  = count (varint), then per header: name (varint length + bytes), value (varint length + bytes)
//! body     = varint length + bytes
//! ```
//!
//! Lengths are unsigned LEB128 varints, so a typical JSON answer costs a few bytes of framing.
//! Trailers are kept (gRPC answers carry `grpc-status` and `grpc-message` there). Decoding slices
//! the stored buffer: header values and the body share it, nothing is copied.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

const VERSION: u8 = 1;

/// A response as it is stored for replay: status, headers, body and trailers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code.
    pub status: StatusCode,
    /// The headers kept for replay (hop-by-hop, `Date` and sensitive headers already removed).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// The trailers, if the response had any.
    pub trailers: Option<HeaderMap>,
}

/// Why a stored response could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(&'static str);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stored response is corrupt: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

impl StoredResponse {
    /// Encodes the response into one buffer.
    pub fn encode(&self) -> Bytes {
        let all = |_: &HeaderName| true;
        encode_parts(
            self.status,
            (&self.headers, all),
            None,
            &self.body,
            self.trailers.as_ref().map(|trailers| (trailers, all)),
        )
        .0
    }

    /// Decodes what [`encode`](Self::encode) wrote.
    pub fn decode(encoded: &Bytes) -> Result<Self, DecodeError> {
        Self::decode_with_room(encoded, 0)
    }

    /// [`decode`](Self::decode), with room in the header map for `extra` more fields (a replay
    /// adds `Idempotent-Replayed`), so that adding them does not grow the map.
    pub(crate) fn decode_with_room(encoded: &Bytes, extra: usize) -> Result<Self, DecodeError> {
        let mut reader = Reader {
            buf: encoded,
            pos: 0,
        };
        if reader.u8()? != VERSION {
            return Err(DecodeError("unknown version"));
        }
        let status = u16::from_be_bytes([reader.u8()?, reader.u8()?]);
        let status = StatusCode::from_u16(status).map_err(|_| DecodeError("bad status"))?;
        let headers = reader.map(extra)?;
        let body = reader.bytes()?;
        let trailers = match reader.u8()? {
            0 => None,
            1 => Some(reader.map(0)?),
            _ => return Err(DecodeError("bad trailer flag")),
        };
        if reader.pos != encoded.len() {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(Self {
            status,
            headers,
            body,
            trailers,
        })
    }
}

/// Encodes a response as [`StoredResponse::encode`] does, with only the header (and trailer)
/// fields that `keep` accepts, straight from the borrowed maps (no map is copied), and the
/// `extra` field after them. Returns where the extra field's value is in the encoding.
pub(crate) fn encode_parts<H, T>(
    status: StatusCode,
    (headers, keep_header): (&HeaderMap, H),
    extra: Option<(&HeaderName, &[u8])>,
    body: &[u8],
    trailers: Option<(&HeaderMap, T)>,
) -> (Bytes, Option<std::ops::Range<usize>>)
where
    H: Fn(&HeaderName) -> bool,
    T: Fn(&HeaderName) -> bool,
{
    let (mut header_count, mut header_bytes) = measure_map(headers, &keep_header);
    if let Some((name, value)) = extra {
        header_count += 1;
        header_bytes += field_len(name.as_str().len(), value.len());
    }
    let mut size = 1 + 2 + varint_len(header_count) + header_bytes;
    size += varint_len(body.len()) + body.len() + 1;
    let trailers = trailers.map(|(map, keep)| {
        let (count, bytes) = measure_map(map, &keep);
        size += varint_len(count) + bytes;
        (map, keep, count)
    });
    let mut out = BytesMut::with_capacity(size);
    out.put_u8(VERSION);
    out.put_u16(status.as_u16());
    put_varint(&mut out, header_count);
    for (name, value) in headers.iter().filter(|(name, _)| keep_header(name)) {
        put_bytes(&mut out, name.as_str().as_bytes());
        put_bytes(&mut out, value.as_bytes());
    }
    let extra_at = extra.map(|(name, value)| {
        put_bytes(&mut out, name.as_str().as_bytes());
        put_bytes(&mut out, value);
        out.len() - value.len()..out.len()
    });
    put_bytes(&mut out, body);
    match &trailers {
        Some((map, keep, count)) => {
            out.put_u8(1);
            put_map(&mut out, map, *count, keep);
        }
        None => out.put_u8(0),
    }
    debug_assert_eq!(out.len(), size);
    (out.freeze(), extra_at)
}

/// How many fields of `map` are kept, and their encoded size.
fn measure_map(map: &HeaderMap, keep: &impl Fn(&HeaderName) -> bool) -> (usize, usize) {
    map.iter()
        .filter(|(name, _)| keep(name))
        .fold((0, 0), |(count, bytes), (name, value)| {
            (
                count + 1,
                bytes + field_len(name.as_str().len(), value.len()),
            )
        })
}

/// The encoded size of one field.
fn field_len(name: usize, value: usize) -> usize {
    varint_len(name) + name + varint_len(value) + value
}

fn varint_len(value: usize) -> usize {
    let bits = usize::BITS - (value | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

fn put_varint(out: &mut BytesMut, mut value: usize) {
    while value >= 0x80 {
        out.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    put_varint(out, bytes.len());
    out.put_slice(bytes);
}

fn put_map(out: &mut BytesMut, map: &HeaderMap, count: usize, keep: &impl Fn(&HeaderName) -> bool) {
    put_varint(out, count);
    for (name, value) in map.iter().filter(|(name, _)| keep(name)) {
        put_bytes(out, name.as_str().as_bytes());
        put_bytes(out, value.as_bytes());
    }
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let byte = *self.buf.get(self.pos).ok_or(DecodeError("truncated"))?;
        self.pos += 1;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<usize, DecodeError> {
        let mut value: usize = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            value |= usize::from(byte & 0x7f)
                .checked_shl(shift)
                .ok_or(DecodeError("varint overflow"))?;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError("varint too long"))
    }

    /// Where the next length-prefixed field is, read past it.
    fn field(&mut self) -> Result<std::ops::Range<usize>, DecodeError> {
        let len = self.varint()?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(DecodeError("truncated"))?;
        let start = std::mem::replace(&mut self.pos, end);
        Ok(start..end)
    }

    /// The next field, sharing the buffer.
    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let range = self.field()?;
        Ok(self.buf.slice(range))
    }

    fn map(&mut self, extra: usize) -> Result<HeaderMap, DecodeError> {
        let count = self.varint()?;
        // Every entry takes at least two bytes: refuse absurd counts before allocating.
        if count > self.buf.len() {
            return Err(DecodeError("bad header count"));
        }
        let mut map = HeaderMap::with_capacity(count + extra);
        for _ in 0..count {
            // Read in place: a name is copied or found among the standard ones, not shared.
            let name = self.field()?;
            let name = HeaderName::from_bytes(&self.buf[name])
                .map_err(|_| DecodeError("bad header name"))?;
            let value = HeaderValue::from_maybe_shared(self.bytes()?)
                .map_err(|_| DecodeError("bad header value"))?;
            map.append(name, value);
        }
        Ok(map)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample(trailers: Option<HeaderMap>) -> StoredResponse {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b"));
        StoredResponse {
            status: StatusCode::CREATED,
            headers,
            body: Bytes::from(vec![7u8; 300]),
            trailers,
        }
    }

    #[test]
    fn round_trips_with_and_without_trailers() {
        let plain = sample(None);
        assert_eq!(StoredResponse::decode(&plain.encode()).unwrap(), plain);

        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers.insert("grpc-message", HeaderValue::from_static("ok%20done"));
        let grpc = sample(Some(trailers));
        let decoded = StoredResponse::decode(&grpc.encode()).unwrap();
        assert_eq!(decoded, grpc);
        assert_eq!(decoded.headers.get_all("x-multi").iter().count(), 2);
    }

    #[test]
    fn empty_response_is_small() {
        let empty = StoredResponse {
            status: StatusCode::NO_CONTENT,
            headers: HeaderMap::new(),
            body: Bytes::new(),
            trailers: None,
        };
        let encoded = empty.encode();
        assert_eq!(encoded.len(), 6);
        assert_eq!(StoredResponse::decode(&encoded).unwrap(), empty);
    }

    #[test]
    fn varint_lengths_match_the_encoder() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            usize::MAX,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            assert_eq!(varint_len(value), out.len(), "{value}");
        }
    }

    #[test]
    fn filtered_encoding_equals_encoding_the_filtered_maps() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers.insert("x-drop", HeaderValue::from_static("1"));
        let mut full = sample(Some(trailers));
        full.headers.insert("x-drop", HeaderValue::from_static("2"));
        let keep = |name: &HeaderName| name != "x-drop";
        let (filtered, length) = encode_parts(
            full.status,
            (&full.headers, keep),
            Some((&http::header::CONTENT_LENGTH, b"300")),
            &full.body,
            full.trailers.as_ref().map(|t| (t, keep)),
        );
        let mut expected = full.clone();
        expected.headers.remove("x-drop");
        expected
            .headers
            .append("content-length", HeaderValue::from_static("300"));
        expected.trailers.as_mut().unwrap().remove("x-drop");
        assert_eq!(filtered, expected.encode());
        assert_eq!(&filtered[length.unwrap()], b"300");
        assert_eq!(StoredResponse::decode(&filtered).unwrap(), expected);
    }

    #[test]
    fn large_lengths_use_multibyte_varints() {
        let mut big = sample(None);
        big.body = Bytes::from(vec![1u8; 200_000]);
        assert_eq!(StoredResponse::decode(&big.encode()).unwrap(), big);
    }

    #[test]
    fn refuses_corrupt_input() {
        let encoded = sample(None).encode();
        for cut in 0..encoded.len() {
            assert!(
                StoredResponse::decode(&encoded.slice(..cut)).is_err(),
                "cut at {cut}"
            );
        }
        let mut extra = encoded.to_vec();
        extra.push(0);
        assert!(StoredResponse::decode(&Bytes::from(extra)).is_err());
        let mut version = encoded.to_vec();
        version[0] = 9;
        assert!(StoredResponse::decode(&Bytes::from(version)).is_err());
        assert!(
            StoredResponse::decode(&Bytes::from_static(&[
                1, 0, 200, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]))
            .is_err()
        );
    }
}
