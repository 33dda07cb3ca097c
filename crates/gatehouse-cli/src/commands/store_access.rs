//! Opening the shared database from the CLI, and the output conventions
//! every listing command follows: a table for people, `--json` one object per
//! line with a `v` (shape version) field.
//!
//! Homes: only commands that set Gatehouse up (`protect`, `wrap`, `up`,
//! `pause`, `policy init`) create one. Commands that read or change what is
//! recorded take [`existing_home`]: a mistyped `--home` is an error naming
//! it, never an empty listing and a fresh database.

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

/// The home a command may create (`--home`, else `$GATEHOUSE_HOME`, else
/// the per-OS data directory).
pub fn home_dir(explicit: Option<&Path>) -> PathBuf {
    home::resolve(explicit)
}

/// The home of a command that reads (or changes) what is recorded: a
/// directory holding the database, else an error naming it. Creates nothing.
pub fn existing_home(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = home::resolve(explicit);
    check_not_a_file(&dir)?;
    if !dir.is_dir() {
        anyhow::bail!(
            "no Gatehouse data at {}: no such directory (check --home or GATEHOUSE_HOME)",
            dir.display()
        );
    }
    if !dir.join(gatehouse_store::DB_FILE).is_file() {
        anyhow::bail!(
            "no Gatehouse data at {}: it holds no {} (`gatehouse protect`, `wrap` or `up` \
             create it; check --home or GATEHOUSE_HOME)",
            dir.display(),
            gatehouse_store::DB_FILE
        );
    }
    Ok(dir)
}

/// A home that exists but is not a directory, said plainly (creating it
/// would fail with a bare "File exists").
fn check_not_a_file(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "{} is not a directory (--home and GATEHOUSE_HOME name Gatehouse's data directory)",
            dir.display()
        );
    }
    Ok(())
}

/// Opens the database in `home_dir`, creating both when missing.
pub async fn open(home_dir: &Path) -> anyhow::Result<Store> {
    check_not_a_file(home_dir)?;
    home::ensure_private_dir(home_dir)
        .with_context(|| format!("creating the Gatehouse home {}", home_dir.display()))?;
    Store::open(home_dir, StoreOptions::control_plane())
        .await
        .with_context(|| format!("opening the Gatehouse database in {}", home_dir.display()))
}

pub fn mac_key(home_dir: &Path) -> anyhow::Result<MacKey> {
    check_not_a_file(home_dir)?;
    let (key, _) = gatehouse_proxy::wrap::load_mac_key(home_dir)
        .with_context(|| format!("reading the install key in {}", home_dir.display()))?;
    Ok(key)
}

/// Parses an age or a duration: a whole number and a unit, `30s`, `15m`,
/// `1h`, `7d`, into milliseconds. The unit is required: a bare `30` could
/// mean any of them.
pub fn parse_age(text: &str) -> anyhow::Result<i64> {
    const LIKE: &str = "like 30s, 15m, 1h or 7d";
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(digits);
    if num.is_empty() {
        anyhow::bail!("{text:?} is not a duration {LIKE}");
    }
    if unit.is_empty() {
        anyhow::bail!("{text:?}: add a unit: s, m, h or d ({LIKE})");
    }
    if unit.starts_with(['.', ',']) {
        anyhow::bail!("{text:?}: the number must be a whole number (90m rather than 1.5h)");
    }
    let ms: i64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => anyhow::bail!("{text:?}: the unit must be s, m, h or d ({LIKE})"),
    };
    num.parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(ms))
        .with_context(|| format!("{text:?} is too long"))
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

    #[track_caller]
    fn check_age(text: &str, expect: Result<i64, &str>) {
        match (parse_age(text), expect) {
            (Ok(ms), Ok(want)) => assert_eq!(ms, want, "{text:?}"),
            (Err(e), Err(want)) => assert!(
                e.to_string().contains(want),
                "{text:?}: the error says {want:?}, not {e}"
            ),
            (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn ages_need_a_whole_number_and_a_unit() {
        check_age("90s", Ok(90_000));
        check_age("15m", Ok(900_000));
        check_age("1h", Ok(3_600_000));
        check_age("7d", Ok(604_800_000));
        check_age("0s", Ok(0));
        check_age("30", Err("add a unit: s, m, h or d"));
        check_age("1", Err("add a unit: s, m, h or d"));
        check_age("1.5h", Err("must be a whole number"));
        check_age("5x", Err("the unit must be s, m, h or d"));
        check_age("5 m", Err("the unit must be s, m, h or d"));
        check_age("soon", Err("is not a duration like 30s"));
        check_age("", Err("is not a duration like 30s"));
        check_age("-5m", Err("is not a duration like 30s"));
        check_age("99999999999999999999d", Err("is too long"));
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_time(1_795_000_000_000), "2026-11-18 11:06:40Z");
    }
}
