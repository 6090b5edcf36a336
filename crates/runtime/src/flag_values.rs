//! Parsers for flag values written as KCM's Go flags take them, shared by
//! the binary and by each controller crate's own flags.

use std::time::Duration;

/// Parses a Go duration string (`15s`, `1m30s`, `500ms`, `1.5h`), as KCM's
/// flags accept.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        if num_len == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let n: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid number in duration {s:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in duration {s:?}")),
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("duration {s:?}: {e}"))
}

/// A Go `strconv.ParseBool` boolean, as KCM's bool flags take.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}
