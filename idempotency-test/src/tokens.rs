//! The one-time token suite.

use std::sync::Arc;

use idempotency_core::Scope;
use idempotency_token::{TokenOutcome, TokenStore};

use crate::support::{LONG, PAST_SHORT, SHORT, concurrently, unique_key};

/// One-time tokens: consumed once, scoped, expiring, and exactly one of 100 concurrent
/// consumers wins.
pub async fn tokens<T: TokenStore>(tokens: Arc<T>) {
    let scope = Scope::new("conformance.tokens").with_principal(unique_key().to_hex());
    let token = tokens.issue(&scope, LONG).await.unwrap();
    assert!(token.value.len() >= 22, "at least 128 bits");
    assert!(
        token
            .value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    let other_scope = Scope::new("conformance.tokens").with_principal("someone else");
    assert_eq!(
        tokens.consume(&other_scope, &token.value).await.unwrap(),
        TokenOutcome::Invalid
    );
    assert_eq!(
        tokens.consume(&scope, &token.value).await.unwrap(),
        TokenOutcome::Consumed
    );
    assert_eq!(
        tokens.consume(&scope, &token.value).await.unwrap(),
        TokenOutcome::Invalid
    );
    assert_eq!(
        tokens.consume(&scope, "never-issued").await.unwrap(),
        TokenOutcome::Invalid
    );

    let short = tokens.issue(&scope, SHORT).await.unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(
        tokens.consume(&scope, &short.value).await.unwrap(),
        TokenOutcome::Invalid
    );

    let contested = tokens.issue(&scope, LONG).await.unwrap();
    let outcomes = concurrently(100, |_| {
        let tokens = Arc::clone(&tokens);
        let scope = scope.clone();
        let value = contested.value.clone();
        async move { tokens.consume(&scope, &value).await.unwrap() }
    })
    .await;
    let consumed = outcomes
        .iter()
        .filter(|o| **o == TokenOutcome::Consumed)
        .count();
    assert_eq!(consumed, 1, "exactly one of 100 concurrent consumers wins");
}
