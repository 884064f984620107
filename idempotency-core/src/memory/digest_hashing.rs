//! The memory store's map hashing: keys that are digests already need mixing, not SipHash.

use std::hash::{BuildHasher, Hasher};

/// Hashes the memory store's map keys: storage keys are BLAKE3 digests, uniform already, so one
/// of their 64-bit words, XORed with a per-store random seed, goes through MurmurHash3's 64-bit
/// finalizer (two multiplies, three shifts) in place of SipHash's rounds.
///
/// The random word is what keeps buckets unpredictable: storage keys are unkeyed digests anyone
/// can compute, so a client could search for keys whose digests share their low bits; after the
/// mix, which keys share a bucket depends on a word it cannot see.
#[derive(Clone, Copy, Debug)]
pub(super) struct DigestHashing {
    seed: u64,
}

impl DigestHashing {
    /// A fresh random seed, drawn from the standard library's per-process `RandomState` keys.
    pub(super) fn new() -> Self {
        Self {
            seed: std::hash::RandomState::new().hash_one(0u64),
        }
    }
}

impl BuildHasher for DigestHashing {
    type Hasher = DigestHasher;

    fn build_hasher(&self) -> DigestHasher {
        DigestHasher {
            seed: self.seed,
            hash: 0,
        }
    }
}

/// The hasher [`DigestHashing`] builds.
pub(super) struct DigestHasher {
    seed: u64,
    hash: u64,
}

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write_u64(&mut self, word: u64) {
        let mut mixed = word ^ self.seed ^ self.hash.rotate_left(29);
        mixed ^= mixed >> 33;
        mixed = mixed.wrapping_mul(0xff51_afd7_ed55_8ccd);
        mixed ^= mixed >> 33;
        mixed = mixed.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        self.hash = mixed ^ (mixed >> 33);
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_words_hash_equal_and_seeds_change_the_hash() {
        let (a, b) = (DigestHashing::new(), DigestHashing::new());
        assert_eq!(a.hash_one(42u64), a.hash_one(42u64));
        assert_ne!(a.hash_one(42u64), a.hash_one(43u64));
        assert_ne!(a.hash_one(42u64), b.hash_one(42u64), "per-store seeds");
    }

    #[test]
    fn words_alike_but_in_ten_bits_spread_over_buckets() {
        // Words a client could find by searching digests: equal but in 10 bits, here or there.
        // 1 024 keys fill about 647 of 1 024 buckets when spread at random (σ ≈ 9).
        for _ in 0..100 {
            let hashing = DigestHashing::new();
            for shift in [0, 16, 40, 54] {
                let buckets: std::collections::HashSet<u64> = (0..1024u64)
                    .map(|varying| {
                        hashing.hash_one((varying << shift) ^ 0x5EED_BEEF_CAFE_F00D) & 1023
                    })
                    .collect();
                assert!(buckets.len() > 560, "{} of 1024 buckets", buckets.len());
            }
        }
    }
}
