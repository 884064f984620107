//! What the example producers publish: the gateway's "paid" events, every one several times.

use crate::Paid;

/// A producer's run: `trades` trades, each event published `copies` times (the gateway's
/// retries), trade numbers `<prefix>1` … `<prefix><trades>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// How many trades.
    pub trades: u32,
    /// How many times each trade's event is published.
    pub copies: u32,
    /// The trade numbers' prefix.
    pub prefix: String,
}

/// The producers' usage line.
pub const USAGE: &str = "usage: [--trades N] [--copies K] [--prefix P]  (defaults: 3 trades, 6 copies each, prefix T<unix time>-)";

impl Publication {
    /// Reads `--trades`, `--copies` and `--prefix` from `args` (the program name excluded).
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let mut publication = Self {
            trades: 3,
            copies: 6,
            prefix: format!("T{unix}-"),
        };
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
            let count = || {
                value
                    .parse::<u32>()
                    .map_err(|_| format!("{flag} {value:?}: not a whole number\n{USAGE}"))
            };
            match flag.as_str() {
                "--trades" => publication.trades = count()?,
                "--copies" => publication.copies = count()?,
                "--prefix" => publication.prefix = value,
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        Ok(publication)
    }

    /// Every delivery's JSON payload, in publishing order: round after round of all trades.
    pub fn payloads(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..self.copies).flat_map(move |_| {
            (1..=self.trades).map(move |trade| {
                let paid = Paid {
                    trade_no: format!("{}{trade}", self.prefix),
                    user_id: i64::from(trade),
                };
                serde_json::to_vec(&paid).unwrap_or_default()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Publication, String> {
        Publication::from_args(args.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn every_trade_is_published_copies_times() {
        let publication = parse(&["--trades", "2", "--copies", "3", "--prefix", "X-"]).unwrap();
        let payloads: Vec<String> = publication
            .payloads()
            .map(|payload| String::from_utf8(payload).unwrap())
            .collect();
        assert_eq!(payloads.len(), 6);
        assert_eq!(payloads[0], r#"{"trade_no":"X-1","user_id":1}"#);
        assert_eq!(payloads[1], r#"{"trade_no":"X-2","user_id":2}"#);
        assert_eq!(payloads[2], payloads[0]);
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        assert!(parse(&["--trades"]).unwrap_err().contains("needs a value"));
        assert!(
            parse(&["--copies", "six"])
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(
            parse(&["--queue", "x"])
                .unwrap_err()
                .contains("unknown argument")
        );
    }
}
