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
        let mut size = 1 + 2 + 10 + 10 + self.body.len() + 1;
        for map in std::iter::once(&self.headers).chain(self.trailers.as_ref()) {
            size += 10
                + map
                    .iter()
                    .map(|(n, v)| n.as_str().len() + v.len() + 4)
                    .sum::<usize>();
        }
        let mut out = BytesMut::with_capacity(size);
        out.put_u8(VERSION);
        out.put_u16(self.status.as_u16());
        put_map(&mut out, &self.headers);
        put_bytes(&mut out, &self.body);
        match &self.trailers {
            Some(trailers) => {
                out.put_u8(1);
                put_map(&mut out, trailers);
            }
            None => out.put_u8(0),
        }
        out.freeze()
    }

    /// Decodes what [`encode`](Self::encode) wrote.
    pub fn decode(encoded: &Bytes) -> Result<Self, DecodeError> {
        let mut reader = Reader {
            buf: encoded,
            pos: 0,
        };
        if reader.u8()? != VERSION {
            return Err(DecodeError("unknown version"));
        }
        let status = u16::from_be_bytes([reader.u8()?, reader.u8()?]);
        let status = StatusCode::from_u16(status).map_err(|_| DecodeError("bad status"))?;
        let headers = reader.map()?;
        let body = reader.bytes()?;
        let trailers = match reader.u8()? {
            0 => None,
            1 => Some(reader.map()?),
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

fn put_map(out: &mut BytesMut, map: &HeaderMap) {
    put_varint(out, map.len());
    for (name, value) in map {
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

    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let len = self.varint()?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(DecodeError("truncated"))?;
        let slice = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(slice)
    }

    fn map(&mut self) -> Result<HeaderMap, DecodeError> {
        let count = self.varint()?;
        // Every entry takes at least two bytes: refuse absurd counts before allocating.
        if count > self.buf.len() {
            return Err(DecodeError("bad header count"));
        }
        let mut map = HeaderMap::with_capacity(count);
        for _ in 0..count {
            let name = self.bytes()?;
            let name = HeaderName::from_bytes(&name).map_err(|_| DecodeError("bad header name"))?;
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
