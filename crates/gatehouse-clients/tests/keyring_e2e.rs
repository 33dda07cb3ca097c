//! Protect → unprotect of the whole Linux fixture home against a real
//! Secret Service. Runs only with `KEYRING_IT=1` inside `dbus-run-session`
//! with an unlocked gnome-keyring (docs/vault.md has the command).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gatehouse_clients::discover::{all_projects, config_files};
use gatehouse_clients::protect::{FixedProbe, NoRegistry, Options, Protector};
use gatehouse_clients::{HomeDirs, Os, CLIENTS};
use gatehouse_vault::{KeyringVault, Vault};

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            #[cfg(unix)]
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn grep_tree(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            hits.extend(grep_tree(&p, needle));
        } else if std::fs::read(&p).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle)) {
            hits.push(p);
        }
    }
    hits
}

#[test]
fn fixture_home_round_trip_through_the_real_keyring() {
    if std::env::var("KEYRING_IT").as_deref() != Ok("1") {
        eprintln!("skipped: set KEYRING_IT=1 inside dbus-run-session with gnome-keyring unlocked");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/linux-all"),
        root,
    );
    let dirs = HomeDirs::fixture(root, Os::Linux);
    let vault = KeyringVault::with_service(&format!("gatehouse-it-{}", std::process::id()));
    vault.probe().expect("the Secret Service answers");
    let n = AtomicUsize::new(0);
    let p = Protector {
        gatehouse_home: root.join("gh"),
        exe: PathBuf::from("/opt/gatehouse/bin/gatehouse"),
        vault: &vault,
        registry: &NoRegistry,
        processes: &FixedProbe::default(),
        ids: Mutex::new(Box::new(move || {
            format!("srv_kr{}", n.fetch_add(1, Ordering::SeqCst))
        })),
        stamp: "t".into(),
    };
    let files: Vec<_> = CLIENTS
        .iter()
        .flat_map(|c| config_files(c, &dirs, &all_projects(&dirs, &[root.join("project")])))
        .collect();
    let originals: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(&f.path).unwrap())
        .collect();
    let opts = Options {
        yes: true,
        ..Options::default()
    };
    for f in &files {
        p.protect_file(f, &opts).unwrap();
    }
    let canary = "ghp_CANARY0123456789abcdefghijKLMNOP";
    assert!(
        grep_tree(root, canary).is_empty(),
        "after protect the canary is on no disk under the fixture root"
    );
    assert_eq!(
        vault
            .get("srv_kr0", "GITHUB_PERSONAL_ACCESS_TOKEN")
            .unwrap()
            .unwrap()
            .expose(),
        canary,
        "it is in the keyring"
    );
    for (f, original) in files.iter().zip(&originals) {
        p.unprotect_file(f, &opts).unwrap();
        assert_eq!(
            &std::fs::read_to_string(&f.path).unwrap(),
            original,
            "{} restored exactly",
            f.path.display()
        );
    }
    assert!(
        vault.list("srv_kr0").unwrap().is_empty(),
        "keyring entries are removed on unprotect"
    );
}
