//! Who calls `POST /orders`: the caller an `Authorization: Bearer` token names. It scopes the
//! orders' idempotency keys, so one caller never gets another caller's stored order, nor learns
//! that a key exists.
//!
//! `API_TOKENS` (`token=caller,…`) names the accepted tokens and their callers, as a real
//! service's authentication would; a token not listed has no caller, and its orders are refused
//! 401. Without `API_TOKENS` (a demo, the tests) every bearer token is a caller of its own.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;

/// The environment variable of the accepted tokens: `token=caller,…`.
pub const API_TOKENS: &str = "API_TOKENS";

/// The bearer token the example's own clients send ([`client`](super::client)) when they name
/// none.
pub const DEMO_TOKEN: &str = "demo-client";

/// The callers the service knows: by token, or (without a list) one per token.
#[derive(Clone, Debug, Default)]
pub struct Callers {
    tokens: Option<Arc<HashMap<String, String>>>,
}

impl Callers {
    /// Every bearer token is a caller of its own (no list).
    pub fn any_token() -> Self {
        Self::default()
    }

    /// The callers of `API_TOKENS`' form, `token=caller,…`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for entry in spec
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
        {
            let (token, caller) = entry
                .split_once('=')
                .filter(|(token, caller)| !token.trim().is_empty() && !caller.trim().is_empty())
                .ok_or_else(|| format!("{entry:?} is not token=caller"))?;
            tokens.insert(token.trim().to_owned(), caller.trim().to_owned());
        }
        if tokens.is_empty() {
            return Err("no token=caller entry".to_owned());
        }
        Ok(Self {
            tokens: Some(Arc::new(tokens)),
        })
    }

    /// The caller of a request's `Authorization: Bearer` token, if it names one.
    pub fn caller(&self, headers: &HeaderMap) -> Option<String> {
        let token = headers
            .get(AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?
            .trim();
        if token.is_empty() {
            return None;
        }
        match &self.tokens {
            Some(tokens) => tokens.get(token).cloned(),
            None => Some(token.to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn listed_tokens_name_their_callers_and_others_none() {
        let callers = Callers::parse("t-alice=alice, t-bob=bob").unwrap();
        assert_eq!(callers.caller(&bearer("t-alice")).as_deref(), Some("alice"));
        assert_eq!(callers.caller(&bearer("t-mallory")), None);
        assert_eq!(callers.caller(&HeaderMap::new()), None);
        assert!(Callers::parse("nobody").is_err());
    }

    #[test]
    fn without_a_list_each_token_is_its_own_caller() {
        let callers = Callers::any_token();
        assert_eq!(callers.caller(&bearer("x")).as_deref(), Some("x"));
        assert_eq!(callers.caller(&bearer(" ")), None);
    }
}
