//! The client's idempotency key, validated.

use std::borrow::Cow;
use std::fmt;

/// Longest key accepted, in characters (after unquoting).
pub const MAX_KEY_LEN: usize = 255;

/// A validated idempotency key: 1–255 characters of visible ASCII (`0x21..=0x7E`).
///
/// Keys arrive as a bare token (`Idempotency-Key: 8e03978e`) or, as the IETF draft writes them, an
/// RFC 8941 sf-string (`Idempotency-Key: "8e03978e"`); [`IdempotencyKey::from_header`] accepts
/// both. A header value that opens with `"` is read as an sf-string and must be well formed.
/// A bare token has no comma: `a1,a2` is two values (a proxy joining two headers), refused as
/// [`KeyError::Multiple`]; a quoted key may hold one.
///
/// ```
/// use idempotency_core::IdempotencyKey;
///
/// assert_eq!(IdempotencyKey::from_header(b"\"abc-1\"").unwrap().as_str(), "abc-1");
/// assert_eq!(IdempotencyKey::parse("abc-1").unwrap().as_str(), "abc-1");
/// assert!(IdempotencyKey::parse("").is_err());
/// assert!(IdempotencyKey::parse("caf\u{e9}").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// No key was supplied where one is required.
    #[error("the idempotency key is missing")]
    Missing,
    /// The key was supplied more than once (two header values).
    #[error("the idempotency key was given more than once")]
    Multiple,
    /// The key is empty.
    #[error("the idempotency key is empty")]
    Empty,
    /// The key is longer than 255 characters.
    #[error("the idempotency key is {0} characters long; at most {MAX_KEY_LEN} are allowed")]
    TooLong(usize),
    /// The key holds a character outside visible ASCII.
    #[error("the idempotency key holds a character outside visible ASCII at position {0}")]
    InvalidCharacter(usize),
    /// A quoted key is not a well-formed RFC 8941 sf-string.
    #[error("the idempotency key is not a well-formed quoted string")]
    MalformedQuotedString,
    /// A key taken from a request body could not be read.
    #[error("the idempotency key could not be read from the body: {0}")]
    Body(String),
}

impl IdempotencyKey {
    /// Validates a key given as plain text.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        validate(key.as_bytes())?;
        Ok(Self(key.to_owned()))
    }

    /// Parses a header value: an RFC 8941 sf-string (`"…"`, with `\"` and `\\` escapes) or a bare
    /// token, then validates the result.
    pub fn from_header(value: &[u8]) -> Result<Self, KeyError> {
        Ok(Self(Self::header_text(value)?.into_owned()))
    }

    /// The key text of a header value, validated as [`from_header`](Self::from_header) validates
    /// it: borrowed from `value` for a bare token (a caller that only hashes the key copies
    /// nothing), unescaped for an sf-string.
    ///
    /// ```
    /// use idempotency_core::IdempotencyKey;
    ///
    /// assert_eq!(IdempotencyKey::header_text(b"k-1").unwrap(), "k-1");
    /// assert_eq!(IdempotencyKey::header_text(b"\"k-1\"").unwrap(), "k-1");
    /// assert!(IdempotencyKey::header_text(b"").is_err());
    /// assert!(IdempotencyKey::header_text(b"a1,a2").is_err()); // two values
    /// assert_eq!(IdempotencyKey::header_text(b"\"a1,a2\"").unwrap(), "a1,a2");
    /// ```
    pub fn header_text(value: &[u8]) -> Result<Cow<'_, str>, KeyError> {
        match value.first() {
            Some(b'"') => {
                let unquoted = unquote_sf_string(value)?;
                validate(unquoted.as_bytes())?;
                Ok(Cow::Owned(unquoted))
            }
            _ => {
                validate(value)?;
                if value.contains(&b',') {
                    return Err(KeyError::Multiple);
                }
                // Validation guarantees ASCII, so the conversion cannot fail.
                std::str::from_utf8(value)
                    .map(Cow::Borrowed)
                    .map_err(|_| KeyError::InvalidCharacter(0))
            }
        }
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&self.0).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

fn validate(bytes: &[u8]) -> Result<(), KeyError> {
    if bytes.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(position) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(KeyError::InvalidCharacter(position));
    }
    if bytes.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(bytes.len()));
    }
    Ok(())
}

/// RFC 8941 §4.2.5: a DQUOTE, printable ASCII with `\"` and `\\` escapes, a closing DQUOTE, nothing after.
fn unquote_sf_string(value: &[u8]) -> Result<String, KeyError> {
    let inner = value
        .strip_prefix(b"\"")
        .and_then(|rest| rest.strip_suffix(b"\""))
        .ok_or(KeyError::MalformedQuotedString)?;
    let mut out = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => out.push(char::from(escaped)),
                _ => return Err(KeyError::MalformedQuotedString),
            },
            b'"' => return Err(KeyError::MalformedQuotedString),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => return Err(KeyError::InvalidCharacter(out.len())),
        }
    }
    Ok(out)
}
