//! Keys as clients send them: bare or as an RFC 8941 sf-string in a header, refused with a
//! reason when empty, too long, not visible ASCII or malformed; and what each error answers.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use idempotency_core::{Error, IdempotencyKey, KeyError};

#[test]
fn accepts_bare_and_quoted_keys() {
    assert_eq!(IdempotencyKey::from_header(b"k-1").unwrap().as_str(), "k-1");
    assert_eq!(
        IdempotencyKey::from_header(b"\"k-1\"").unwrap().as_str(),
        "k-1"
    );
    assert_eq!(
        IdempotencyKey::from_header(br#""a\"b\\c""#)
            .unwrap()
            .as_str(),
        r#"a"b\c"#
    );
}

#[test]
fn refuses_bad_keys() {
    assert_eq!(IdempotencyKey::parse(""), Err(KeyError::Empty));
    assert_eq!(IdempotencyKey::from_header(b"\"\""), Err(KeyError::Empty));
    assert_eq!(
        IdempotencyKey::parse(&"a".repeat(256)),
        Err(KeyError::TooLong(256))
    );
    assert!(IdempotencyKey::parse(&"a".repeat(255)).is_ok());
    assert_eq!(
        IdempotencyKey::parse("a\tb"),
        Err(KeyError::InvalidCharacter(1))
    );
    assert_eq!(
        IdempotencyKey::parse("a b"),
        Err(KeyError::InvalidCharacter(1))
    );
    assert!(IdempotencyKey::parse("ключ").is_err());
    assert_eq!(
        IdempotencyKey::from_header(b"\"abc"),
        Err(KeyError::MalformedQuotedString)
    );
    assert_eq!(
        IdempotencyKey::from_header(b"\"a\"b\""),
        Err(KeyError::MalformedQuotedString)
    );
    assert_eq!(
        IdempotencyKey::from_header(b"\"a\\nb\""),
        Err(KeyError::MalformedQuotedString)
    );
    // A space is legal inside an sf-string but is not visible ASCII.
    assert_eq!(
        IdempotencyKey::from_header(b"\"a b\""),
        Err(KeyError::InvalidCharacter(1))
    );
}

#[test]
fn statuses_and_retries() {
    let in_flight = Error::InFlight {
        retry_after: Duration::from_secs(2),
    };
    assert_eq!(in_flight.http_status(), 409);
    assert_eq!(in_flight.retry_after(), Some(Duration::from_secs(2)));
    assert!(in_flight.is_retryable() && !in_flight.is_transient());
    assert_eq!(Error::Mismatch.http_status(), 422);
    assert_eq!(Error::Key(KeyError::Empty).http_status(), 400);
    let down = Error::Unavailable("refused".into());
    assert_eq!(down.http_status(), 503);
    assert!(down.is_transient() && down.is_retryable());
    assert_eq!(down.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(Error::Config("x".into()).retry_after(), None);
    assert_eq!(Error::Config("x".into()).http_status(), 500);
}
