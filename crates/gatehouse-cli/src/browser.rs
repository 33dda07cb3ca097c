//! Opening the dashboard in the person's browser without putting the
//! sign-in link on any command line.
//!
//! A command line is public: every local user can read `/proc/PID/cmdline`
//! of the URL opener and of the browser it starts, and redeem a single-use
//! sign-in token first. So, as Jupyter does, the link goes into a small
//! redirect page (0600, in a 0700 directory of this user) and the opener
//! gets that page's path, which is worth nothing to anyone who cannot read
//! the file. Pages live at most as long as the token they hold (60 s):
//! older ones are swept whenever a new one is written and when `gatehouse
//! up` starts, and `gatehouse up` removes its own on exit.
//!
//! Where the page goes: `GATEHOUSE_HOME/signin/`. A snap-confined browser
//! (Ubuntu's default Firefox and Chromium) cannot read hidden directories
//! of `$HOME`, so on Linux, when the default browser is a snap, the page
//! goes to that snap's own `~/snap/<name>/common/gatehouse-signin/`, which
//! it can read.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a redirect page may live: the lifetime of the sign-in token it holds.
pub const STALE_AFTER: Duration =
    Duration::from_millis(gatehouse_server::auth::SIGNIN_TTL_MS.unsigned_abs());

/// The folder under `GATEHOUSE_HOME` that holds redirect pages.
pub const SIGNIN_DIR: &str = "signin";

/// Redirect pages are `signin-<random>.html`; nothing else in their folder is touched.
const PREFIX: &str = "signin-";
const SUFFIX: &str = ".html";

/// Where this user's redirect pages go for `home` (see the module docs).
pub fn redirect_dir(home: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    if let Some(dir) = snap_browser_dir() {
        return dir;
    }
    home.join(SIGNIN_DIR)
}

/// The folder a snap-packaged default browser can read, if the default
/// browser is a snap (`xdg-settings` names its `<snap>_<app>.desktop`).
#[cfg(target_os = "linux")]
fn snap_browser_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("xdg-settings")
        .args(["get", "default-web-browser"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let desktop = String::from_utf8(out.stdout).ok()?;
    let snap = snap_name(desktop.trim())?;
    let user_home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    let snap_home = Path::new(&user_home).join("snap").join(snap);
    let installed = Path::new("/var/lib/snapd/desktop/applications")
        .join(desktop.trim())
        .is_file();
    (installed && snap_home.is_dir()).then(|| snap_home.join("common").join("gatehouse-signin"))
}

/// `firefox_firefox.desktop` → `firefox`: snapd names the desktop files
/// it installs `<snap>_<app>.desktop`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn snap_name(desktop: &str) -> Option<&str> {
    let stem = desktop.strip_suffix(".desktop")?;
    let (snap, app) = stem.split_once('_')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    (ok(snap) && !app.is_empty() && !app.contains(['/', '\\'])).then_some(snap)
}

/// Writes a redirect page for `url` into `dir` (created 0700; the page
/// 0600, named at random — never after the token) after sweeping stale
/// pages there. Returns the page's path.
pub fn write_redirect(dir: &Path, url: &str) -> io::Result<PathBuf> {
    make_private_dir(dir)?;
    sweep(dir, SystemTime::now());
    let path = dir.join(format!(
        "{PREFIX}{}{SUFFIX}",
        &gatehouse_server::auth::random_token()[..16]
    ));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&path)?;
    // create_new never follows a link; the mode above was masked by umask
    // only towards fewer rights, but say it outright.
    gatehouse_store::home::make_private_file(&path)?;
    if let Err(e) = file
        .write_all(redirect_html(url).as_bytes())
        .and_then(|()| file.sync_all())
    {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// Removes the redirect pages in `dir` last changed more than
/// [`STALE_AFTER`] before `now` (their tokens have expired); returns how
/// many. A missing folder has none.
pub fn sweep(dir: &Path, now: SystemTime) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(PREFIX) && name.ends_with(SUFFIX)) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let stale = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > STALE_AFTER);
        if stale && meta.is_file() && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Creates `dir` private to this user; refuses a symlink in its place.
fn make_private_dir(dir: &Path) -> io::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is not a directory", dir.display()),
            ));
        }
    }
    gatehouse_store::home::ensure_private_dir(dir)
}

/// A page that sends the browser on to `url` at once (the token stays in
/// the fragment, so it is never sent to a server), with a link for
/// browsers that do not follow the refresh.
fn redirect_html(url: &str) -> String {
    let url = escape(url);
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\">\n\
         <title>Gatehouse</title></head>\n\
         <body><p>Opening the Gatehouse dashboard… \
         <a href=\"{url}\">continue</a> (the link works once, within a minute).</p></body></html>\n"
    )
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Opens `url` (a sign-in link) in the default browser through a redirect
/// page under [`redirect_dir`]; the opener sees only the page's path.
/// Returns the page, for the caller to remove once the browser had its
/// chance; `None` (said on stderr) when nothing could be opened.
pub fn open_signin(home: &Path, url: &str) -> Option<PathBuf> {
    let page = match write_redirect(&redirect_dir(home), url) {
        Ok(page) => page,
        Err(e) => {
            eprintln!(
                "gatehouse: could not write the sign-in page ({e}); open the URL above yourself"
            );
            return None;
        }
    };
    let spawned = opener()
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(mut child) => {
            // Reap the opener without waiting for it here.
            std::thread::spawn(move || child.wait());
            Some(page)
        }
        Err(_) => {
            let _ = std::fs::remove_file(&page);
            eprintln!("gatehouse: could not open a browser; open the URL above yourself");
            None
        }
    }
}

/// The OS's "open this with its default application" command (it gets a
/// file path, never a secret).
fn opener() -> std::process::Command {
    if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(windows) {
        let mut c = std::process::Command::new("rundll32");
        c.arg("url.dll,FileProtocolHandler");
        c
    } else {
        std::process::Command::new("xdg-open")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:4242/signin#t=SeCrEtToKeN_abc-123";

    #[test]
    fn page_is_private_and_not_named_after_the_token() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("home").join(SIGNIN_DIR);
        let page = write_redirect(&dir, URL).unwrap();
        assert!(page.starts_with(&dir), "the page goes where it was asked");
        let name = page.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(PREFIX) && name.ends_with(SUFFIX),
            "the sweep recognises its own pages: {name}"
        );
        assert!(
            !page.to_string_lossy().contains("SeCrEtToKeN"),
            "the path is what the opener's argv shows: it must not hold the token"
        );
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            html.contains("content=\"0;url=http://127.0.0.1:4242/signin#t=SeCrEtToKeN_abc-123\""),
            "the page sends the browser on to the sign-in link:\n{html}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&page), 0o600, "only this user may read the token");
            assert_eq!(mode(&dir), 0o700, "nobody else may list or open the folder");
        }
        let second = write_redirect(&dir, URL).unwrap();
        assert_ne!(page, second, "every page gets its own random name");
    }

    #[cfg(unix)]
    #[test]
    fn an_open_folder_is_made_private_and_a_symlink_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("signin");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        write_redirect(&dir, URL).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "a world-open folder is closed before use");

        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        assert!(
            write_redirect(&link, URL).is_err(),
            "a link planted in place of the folder is not followed"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn markup_in_the_url_is_escaped() {
        let html = redirect_html("http://x/\"><script>alert(1)</script>&");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&quot;&gt;&lt;script&gt;"), "{html}");
        assert!(html.contains("&amp;"), "{html}");
    }

    #[test]
    fn sweep_removes_only_stale_pages() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(SIGNIN_DIR);
        let page = write_redirect(&dir, URL).unwrap();
        let other = dir.join("notes.txt");
        std::fs::write(&other, "keep").unwrap();
        let now = SystemTime::now();
        assert_eq!(sweep(&dir, now), 0, "a fresh page's token still works");
        assert!(page.exists());
        let later = now + STALE_AFTER + Duration::from_secs(2);
        assert_eq!(sweep(&dir, later), 1, "a page older than its token goes");
        assert!(!page.exists());
        assert!(other.exists(), "files that are not redirect pages stay");
        assert_eq!(sweep(&tmp.path().join("missing"), later), 0);
    }

    #[test]
    fn writing_a_page_sweeps_stale_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(SIGNIN_DIR);
        let old = write_redirect(&dir, URL).unwrap();
        let past = SystemTime::now() - STALE_AFTER - Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let new = write_redirect(&dir, URL).unwrap();
        assert!(
            !old.exists(),
            "the expired page is removed when a new one is written"
        );
        assert!(new.exists());
    }

    #[test]
    fn snap_desktop_names() {
        assert_eq!(snap_name("firefox_firefox.desktop"), Some("firefox"));
        assert_eq!(snap_name("chromium_chromium.desktop"), Some("chromium"));
        assert_eq!(snap_name("brave_brave.desktop"), Some("brave"));
        assert_eq!(snap_name("firefox.desktop"), None, "not a snap");
        assert_eq!(snap_name("google-chrome.desktop"), None, "not a snap");
        assert_eq!(snap_name("../x_y.desktop"), None, "never a path");
        assert_eq!(snap_name("firefox_firefox"), None);
    }
}
