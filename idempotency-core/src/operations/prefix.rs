//! Storage keys by a prefix of their hex, as operators shorten them.

use super::{Cursor, Operations, Query};
use crate::{Record, StorageKey, StoreError};

/// The records among every record (a full scan) whose key's hex starts with `hex`, at most
/// `limit`.
pub(crate) async fn by_scan<O: Operations + ?Sized>(
    store: &O,
    hex: &str,
    limit: usize,
) -> Result<Vec<Record>, StoreError> {
    let query = Query::all();
    let mut cursor = Cursor::start();
    let mut found = Vec::new();
    loop {
        let page = store.page(&query, &cursor, super::DEFAULT_BATCH).await?;
        found.extend(
            page.records
                .into_iter()
                .filter(|record| record.key.to_hex().starts_with(hex)),
        );
        match page.next {
            Some(next) if found.len() < limit => cursor = next,
            _ => break,
        }
    }
    found.truncate(limit);
    Ok(found)
}

/// The greatest storage key below every key whose hex starts with `hex` (`None`: no key is
/// below them), for stores that page after a key in key order; `hex` must be hex digits.
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
