//! Storage keys by a prefix of their hex, as operators shorten them.

use idempotency_core::StorageKey;

/// The greatest storage key below every key whose hex starts with `hex` (`None`: no key is
/// below them), to page after it in key order; `hex` must be hex digits.
pub(crate) fn below(hex: &str) -> Option<StorageKey> {
    let mut padded = hex.to_owned();
    padded.truncate(64);
    while padded.len() < 64 {
        padded.push('0');
    }
    let mut bytes = *StorageKey::from_hex(&padded)?.as_bytes();
    // Big-endian minus one: the key just below the least key with the prefix.
    for byte in bytes.iter_mut().rev() {
        if *byte == 0 {
            *byte = 0xff;
        } else {
            *byte -= 1;
            return Some(StorageKey(bytes));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_below_a_prefix() {
        assert_eq!(below("00000000"), None);
        let key = below("ab").map(|key| key.to_hex());
        assert_eq!(key.as_deref(), Some(&*format!("aa{}", "f".repeat(62))));
        let key = below("ab01").map(|key| key.to_hex());
        assert_eq!(key.as_deref(), Some(&*format!("ab00{}", "f".repeat(60))));
    }
}
