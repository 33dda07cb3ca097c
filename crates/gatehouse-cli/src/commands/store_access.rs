//! Opening the shared database from the CLI, and the output conventions
//! every listing command follows: a table for people, `--json` one object per
//! line with a `v` (shape version) field.

use std::path::{Path, PathBuf};

use anyhow::Context;
use gatehouse_store::{home, MacKey, Store, StoreOptions};

/// Version of every `--json` line shape printed by the CLI.
pub const JSON_VERSION: u32 = 1;

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

pub fn home_dir(explicit: Option<&Path>) -> PathBuf {
    home::resolve(explicit)
}

pub async fn open(home_dir: &Path) -> anyhow::Result<Store> {
    home::ensure_private_dir(home_dir)?;
    Store::open(home_dir, StoreOptions::control_plane())
        .await
        .with_context(|| format!("opening the Gatehouse database in {}", home_dir.display()))
}

pub fn mac_key(home_dir: &Path) -> anyhow::Result<MacKey> {
    Ok(gatehouse_proxy::wrap::load_mac_key(home_dir)?.0)
}

/// Parses `30s`, `15m`, `1h`, `7d` into milliseconds.
pub fn parse_age(text: &str) -> anyhow::Result<i64> {
    let (num, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: i64 = num
        .parse()
        .with_context(|| format!("{text:?} is not a duration like 30s, 15m, 1h or 7d"))?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" | "" => 3_600_000,
        "d" => 86_400_000,
        _ => anyhow::bail!("{text:?}: unit must be s, m, h or d"),
    };
    Ok(n * ms)
}

/// Formats unix milliseconds as UTC `YYYY-MM-DD HH:MM:SSZ`.
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times() {
        assert_eq!(parse_age("90s").unwrap(), 90_000);
        assert_eq!(parse_age("1h").unwrap(), 3_600_000);
        assert_eq!(parse_age("7d").unwrap(), 604_800_000);
        assert!(parse_age("soon").is_err());
        assert_eq!(format_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_time(1_795_000_000_000), "2026-11-18 11:06:40Z");
    }
}
