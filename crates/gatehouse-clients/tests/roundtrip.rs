//! Property: protect → unprotect is the identity on a file nobody edited,
//! whatever its layout (indentation, comments, trailing commas) and
//! whatever secrets it carries; and protect leaves no secret in the file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use gatehouse_clients::discover::config_files;
use gatehouse_clients::protect::{FixedProbe, NoRegistry, Options, Protector};
use gatehouse_clients::{client, HomeDirs, Os};
use gatehouse_vault::MemoryVault;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Server {
    name: String,
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z./@-]{1,12}",
        "ghp_[A-Za-z0-9]{36}",
        "sk-[A-Za-z0-9]{24}",
        "[a-z]{3,8}",
        Just("${input:key}".to_owned()),
        Just("${env:HOME}".to_owned()),
        "[A-Za-z0-9 \"\\\\]{0,10}",
    ]
}

fn arg() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        value().prop_map(|v| vec![v]),
        "[A-Za-z0-9]{8,16}".prop_map(|v| vec!["--api-key".to_owned(), v]),
        "[A-Za-z0-9]{8,16}".prop_map(|v| vec![format!("--token={v}")]),
        "[A-Za-z0-9]{8,16}".prop_map(|p| vec![format!("postgresql://app:{p}@db.local:5432/app")]),
    ]
}

fn server() -> impl Strategy<Value = Server> {
    (
        "[a-z]{1,8}",
        "[a-z]{1,6}",
        prop::collection::vec(arg(), 0..4),
        prop::collection::vec(
            (
                prop_oneof![
                    Just("GITHUB_TOKEN"),
                    Just("API_KEY"),
                    Just("LOG_LEVEL"),
                    Just("DATABASE_URL"),
                    Just("MODE")
                ],
                value(),
            ),
            0..4,
        ),
    )
        .prop_map(|(name, command, args, env)| {
            let mut seen = Vec::new();
            let env = env
                .into_iter()
                .filter(|(k, _)| {
                    !seen.contains(k) && {
                        seen.push(*k);
                        true
                    }
                })
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            Server {
                name,
                command,
                args: args.concat(),
                env,
            }
        })
}

#[derive(Debug, Clone)]
struct Layout {
    indent: &'static str,
    comments: bool,
    trailing_commas: bool,
    args_multiline: bool,
}

fn layout() -> impl Strategy<Value = Layout> {
    (
        prop_oneof![Just(""), Just("  "), Just("\t"), Just("    ")],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(indent, comments, trailing_commas, args_multiline)| Layout {
                indent,
                comments,
                trailing_commas,
                args_multiline,
            },
        )
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn render(servers: &[Server], l: &Layout) -> String {
    let nl = if l.indent.is_empty() { "" } else { "\n" };
    let i = |n: usize| l.indent.repeat(n);
    let tc = if l.trailing_commas { "," } else { "" };
    let mut out = String::new();
    if l.comments {
        out.push_str("// servers for this profile\n");
    }
    out.push_str(&format!("{{{nl}{}\"servers\": {{{nl}", i(1)));
    let mut entries = Vec::new();
    for s in servers {
        let mut fields = vec![format!("{}\"command\": {}", i(3), q(&s.command))];
        if !s.args.is_empty() || s.name.len() % 2 == 0 {
            let items: Vec<String> = s.args.iter().map(|a| q(a)).collect();
            let arr = if l.args_multiline && !items.is_empty() && !l.indent.is_empty() {
                format!(
                    "[\n{}{}\n{}]",
                    i(4),
                    items.join(&format!(",\n{}", i(4))),
                    i(3)
                )
            } else {
                format!("[{}]", items.join(", "))
            };
            fields.push(format!("{}\"args\": {arr}", i(3)));
        }
        if !s.env.is_empty() {
            let env: Vec<String> = s
                .env
                .iter()
                .map(|(k, v)| format!("{}: {}", q(k), q(v)))
                .collect();
            fields.push(format!("{}\"env\": {{ {} }}", i(3), env.join(", ")));
        }
        let comment = if l.comments { " /* entry */" } else { "" };
        entries.push(format!(
            "{}{}:{comment} {{{nl}{}{tc}{nl}{}}}",
            i(2),
            q(&s.name),
            fields.join(&format!(",{nl}")),
            i(2)
        ));
    }
    out.push_str(&entries.join(&format!(",{nl}")));
    if !entries.is_empty() {
        out.push_str(tc);
    }
    out.push_str(&format!("{nl}{}}}{tc}{nl}}}\n", i(1)));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn protect_then_unprotect_is_identity(servers in prop::collection::vec(server(), 1..4), l in layout(), edit_after in any::<bool>()) {
        let mut servers = servers;
        let mut names = Vec::new();
        servers.retain(|s| !names.contains(&s.name) && { names.push(s.name.clone()); true });
        let original = render(&servers, &l);
        let tmp = tempfile::tempdir().unwrap();
        let dirs = HomeDirs::fixture(tmp.path(), Os::Linux);
        let path = dirs.config.join("Code/User/mcp.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &original).unwrap();
        let vault = MemoryVault::new();
        let n = AtomicUsize::new(0);
        let p = Protector {
            gatehouse_home: tmp.path().join("gh"),
            exe: PathBuf::from("/opt/gatehouse/bin/gatehouse"),
            vault: &vault,
            registry: &NoRegistry,
            processes: &FixedProbe::default(),
            ids: Mutex::new(Box::new(move || format!("srv_p{}", n.fetch_add(1, Ordering::SeqCst)))),
            stamp: "t".into(),
        };
        let file = config_files(client("vscode").unwrap(), &dirs, &[]).into_iter().next().unwrap();
        p.protect_file(&file, &Options::default()).unwrap();
        let protected = std::fs::read_to_string(&path).unwrap();
        prop_assert!(gatehouse_clients::jsonc::parse(&protected).is_ok(), "protected output must parse:\n{}", protected);
        for s in &servers {
            for (k, v) in &s.env {
                if gatehouse_vault::detect::env_secret(k, v).is_some() && v.len() >= 6 {
                    prop_assert!(!protected.contains(&q(v)), "env secret {} left in the file", k);
                }
            }
        }
        if edit_after {
            // An edit after protect: unprotect must unwrap in place and keep it.
            std::fs::write(&path, format!("{protected}// edited after protect\n")).unwrap();
        }
        p.unprotect_file(&file, &Options::default()).unwrap();
        let restored = std::fs::read_to_string(&path).unwrap();
        if !edit_after {
            prop_assert_eq!(restored, original);
        } else if original.matches("\"args\"").count() == servers.len() {
            prop_assert_eq!(restored, format!("{original}// edited after protect\n"));
        } else {
            // Entries that had no `args` keep an empty one; otherwise equal.
            let views = |t: &str| {
                let doc = gatehouse_clients::doc::ConfigDoc::parse(gatehouse_clients::table::Format::Jsonc, t).unwrap();
                doc.entries("servers", false).into_iter().map(|e| (e.name, format!("{:?}", e.kind), e.env)).collect::<Vec<_>>()
            };
            prop_assert_eq!(views(&restored), views(&original));
            prop_assert!(restored.ends_with("// edited after protect\n"));
        }
        prop_assert!(vault.is_empty(), "vault emptied");
    }
}
