//! Duration literals: `"500ms"`, `"30s"`, `"15m"`, `"24h"`, `"7d"`, `"1h30m"`.

/// Milliseconds in `text`, a sequence of `<digits><unit>` with units `ms`, `s`, `m`, `h`, `d`;
/// `None` if malformed, zero or overflowing.
pub(crate) fn parse_duration(text: &str) -> Option<u64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(number.checked_mul(factor)?)?;
    }
    (total > 0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn parses_units_and_sequences() {
        assert_eq!(parse_duration("500ms"), Some(500));
        assert_eq!(parse_duration("30s"), Some(30_000));
        assert_eq!(parse_duration("15m"), Some(900_000));
        assert_eq!(parse_duration("24h"), Some(86_400_000));
        assert_eq!(parse_duration("7d"), Some(604_800_000));
        assert_eq!(parse_duration("1h30m"), Some(5_400_000));
    }

    #[test]
    fn refuses_malformed_and_zero() {
        for bad in [
            "",
            "30",
            "s",
            "3x",
            "1.5h",
            "-1s",
            "0s",
            "1h 30m",
            "99999999999999999999d",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
