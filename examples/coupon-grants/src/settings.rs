//! The service's settings, read from the environment.

use std::time::Duration;

/// Where the coupons go when `DATABASE_URL` is unset.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The queue (RabbitMQ) or subject (NATS) when `QUEUE` is unset.
pub const DEFAULT_QUEUE: &str = "coupon-grant";

/// The service's settings (see the crate docs for the variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `REDIS_URL`: the fast tier, if any.
    pub redis_url: Option<String>,
    /// `QUEUE`.
    pub queue: String,
    /// `CONCURRENCY`.
    pub concurrency: usize,
    /// `HANDLER_DELAY_MS`: how long each grant holds its transaction before the commit.
    pub handler_delay: Duration,
    /// `ACK_DELAY_MS`: how long each grant waits after its commit, before its ack.
    pub ack_delay: Duration,
}

impl Settings {
    /// Reads the settings; a variable that is set but unreadable is an error naming it.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings from `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let number = |name: &str, default: u64| -> Result<u64, String> {
            lookup(name).map_or(Ok(default), |value| {
                value
                    .trim()
                    .parse()
                    .map_err(|_| format!("{name}={value:?} is not a whole number"))
            })
        };
        let concurrency = number("CONCURRENCY", 16)?;
        if concurrency == 0 {
            return Err("CONCURRENCY=0: at least one delivery must be handled at a time".into());
        }
        Ok(Self {
            database_url: lookup("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.into()),
            redis_url: lookup("REDIS_URL").filter(|url| !url.is_empty()),
            queue: lookup("QUEUE").unwrap_or_else(|| DEFAULT_QUEUE.into()),
            concurrency: usize::try_from(concurrency).unwrap_or(usize::MAX),
            handler_delay: Duration::from_millis(number("HANDLER_DELAY_MS", 0)?),
            ack_delay: Duration::from_millis(number("ACK_DELAY_MS", 0)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_lookup(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn defaults_name_the_local_services_and_no_redis() {
        let settings = read(&[]).unwrap();
        assert_eq!(settings.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(settings.queue, "coupon-grant");
        assert_eq!(settings.redis_url, None);
        assert_eq!(settings.concurrency, 16);
        assert_eq!(settings.handler_delay, Duration::ZERO);
    }

    #[test]
    fn unreadable_numbers_are_named_in_the_error() {
        let error = read(&[("ACK_DELAY_MS", "soon")]).unwrap_err();
        assert!(error.contains("ACK_DELAY_MS"), "{error}");
        assert!(read(&[("CONCURRENCY", "0")]).is_err());
        let settings = read(&[
            ("HANDLER_DELAY_MS", "250"),
            ("REDIS_URL", "redis://127.0.0.1"),
        ]);
        let settings = settings.unwrap();
        assert_eq!(settings.handler_delay, Duration::from_millis(250));
        assert_eq!(settings.redis_url.as_deref(), Some("redis://127.0.0.1"));
    }
}
