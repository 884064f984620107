//! Durations on the command line: `0s`, `500ms`, `10m`, `2h`, `7d`.

use std::time::Duration;

/// Parses a whole number with a unit (`ms`, `s`, `m`, `h`, `d`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write 0s, 500ms, 10m, 2h or 7d"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let seconds = |factor: u64| Duration::from_secs(number.saturating_mul(factor));
    match unit {
        "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(seconds(1)),
        "m" => Ok(seconds(60)),
        "h" => Ok(seconds(3600)),
        "d" => Ok(seconds(86_400)),
        _ => Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h, d)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
