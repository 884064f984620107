//! Length-framed BLAKE3: what storage keys and fingerprints are hashed with.
//!
//! BLAKE3 rather than SHA-256: on CPUs without SHA extensions (Intel servers before Ice Lake,
//! and valgrind's) one SHA-256 block costs ~0.7 µs, and a request hashes about three; a BLAKE3
//! digest of the same parts takes 3-8 times less there (`cargo bench --bench digest`), and
//! needs no CPU extension to be fast.

/// Room for the framed parts of a typical storage key or fingerprint (four BLAKE3 blocks).
const GATHER: usize = 256;

/// BLAKE3 over parts, each after its length (an unsigned LEB128 varint: one byte below 128),
/// so that no two lists of parts hash the same bytes.
///
/// Parts are gathered in a buffer and hashed at once when they fit it (no incremental hasher,
/// whose state is about 2 KiB); longer input goes through one, kept on the heap.
#[derive(Clone)]
pub(crate) struct FramedHasher {
    /// Set up once the input outgrows the buffer.
    hasher: Option<Box<blake3::Hasher>>,
    buffer: [u8; GATHER],
    len: usize,
}

impl FramedHasher {
    pub(crate) fn new() -> Self {
        Self {
            hasher: None,
            buffer: [0; GATHER],
            len: 0,
        }
    }

    /// Adds `part` after its length.
    #[inline]
    pub(crate) fn part(&mut self, part: &[u8]) {
        // A length takes at most 10 bytes.
        if self.len > GATHER - 10 {
            self.flush();
        }
        let mut length = part.len() as u64;
        while length >= 0x80 {
            self.buffer[self.len] = (length as u8 & 0x7f) | 0x80;
            self.len += 1;
            length >>= 7;
        }
        self.buffer[self.len] = length as u8;
        self.len += 1;
        self.raw(part);
    }

    /// Adds bytes without a length.
    #[inline]
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        match self.buffer.get_mut(self.len..self.len + bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => {
                self.flush().update(bytes);
            }
        }
    }

    /// Moves the buffer into the incremental hasher (set up on first use), which it returns.
    fn flush(&mut self) -> &mut blake3::Hasher {
        let hasher = self.hasher.get_or_insert_with(Box::default);
        hasher.update(&self.buffer[..self.len]);
        self.len = 0;
        hasher
    }

    /// The digest of everything added.
    /// (Whatever is added after goes on from there: finishing again without adding anything
    /// gives the same digest.)
    pub(crate) fn finish(&mut self) -> [u8; 32] {
        let gathered = &self.buffer[..self.len];
        match &mut self.hasher {
            None => blake3::hash(gathered).into(),
            Some(hasher) => {
                hasher.update(gathered);
                self.len = 0;
                hasher.finalize().into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(parts: &[&[u8]]) -> [u8; 32] {
        let mut hasher = FramedHasher::new();
        for part in parts {
            hasher.part(part);
        }
        hasher.finish()
    }

    fn raw(bytes: &[u8]) -> [u8; 32] {
        blake3::hash(bytes).into()
    }

    #[test]
    fn framing_is_leb128() {
        assert_eq!(framed(&[b"ab"]), raw(b"\x02ab"));
        let edge = [9u8; 128];
        assert_eq!(
            framed(&[&edge[..127]]),
            raw(&[&[127u8][..], &edge[..127]].concat())
        );
        assert_eq!(
            framed(&[&edge]),
            raw(&[&[0x80, 0x01][..], &edge[..]].concat())
        );
        let long = [7u8; 300];
        assert_eq!(
            framed(&[&long]),
            raw(&[&[0xac, 0x02][..], &long[..]].concat())
        );
    }

    #[test]
    fn gathering_does_not_change_the_digest() {
        // Every split of the buffer: parts that fit, fill it exactly, or overflow it.
        for first in [
            0usize, 1, 60, 117, 118, 126, 127, 128, 129, 245, 246, 255, 256, 257, 300, 2000,
        ] {
            for second in [0usize, 1, 9, 10, 11, 127, 128, 255, 256, 5000] {
                let (a, b) = (vec![1u8; first], vec![2u8; second]);
                let mut expected = Vec::new();
                for part in [&a, &b] {
                    let mut length = part.len();
                    while length >= 0x80 {
                        expected.push((length as u8 & 0x7f) | 0x80);
                        length >>= 7;
                    }
                    expected.push(length as u8);
                    expected.extend_from_slice(part);
                }
                expected.push(1);
                let mut hasher = FramedHasher::new();
                hasher.part(&a);
                hasher.part(&b);
                hasher.raw(&[1]);
                assert_eq!(hasher.finish(), raw(&expected), "{first} + {second}");
            }
        }
    }
}
