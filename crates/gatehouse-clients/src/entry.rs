//! Format-independent view of one server entry, how Gatehouse's own wrapping
//! is recognised, and the per-entry protect plan (id, secrets to move,
//! placeholders, `--pass-env`, the wrap prefix).

use std::path::Path;

pub use gatehouse_vault::detect::header_secret;
use gatehouse_vault::detect::{env_secret, find_arg_secrets};
use gatehouse_vault::{placeholder, Secret};

/// What kind of server an entry describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Started by the client: `command` + `args`.
    Stdio { command: String, args: Vec<String> },
    /// Reached over HTTP/SSE (`url`, `serverUrl`, `httpUrl`).
    Remote { url: String },
    /// Zed extension server (`settings` only): Zed starts it itself.
    Extension,
    /// Not understood (no command, no url).
    Unknown,
}

/// One server entry as read from a config.
#[derive(Debug, Clone)]
pub struct EntryView {
    /// Key path of the server map that holds it (`["mcpServers"]`,
    /// `["projects", "/p", "mcpServers"]`).
    pub container: Vec<String>,
    /// Entry name (the map key).
    pub name: String,
    /// Kind and launch command.
    pub kind: EntryKind,
    /// `env` entries; `None` for non-string values.
    pub env: Vec<(String, Option<String>)>,
    /// The entry names an `envFile` (reported, not rewritten).
    pub env_file: bool,
    /// Zed `remote: true`: runs on a remote dev host, where the local binary is absent.
    pub remote_dev: bool,
    /// Why the entry's launch fields are not what clients accept
    /// (`command` a string, `args` an array of strings, `env` an object of
    /// strings); such an entry is never rewritten.
    pub malformed: Option<String>,
    /// HTTP headers of a remote entry (`headers`, Codex `http_headers`);
    /// `None` for non-string values.
    pub headers: Vec<(String, Option<String>)>,
    /// Set when the entry already runs behind `gatehouse wrap`.
    pub wrapped: Option<WrapInfo>,
    /// Names the client passes from its own environment (Codex `env_vars`);
    /// wrap must pass them on too.
    pub pass_through: Vec<String>,
    /// The args of a launch in a form Gatehouse does not rewrite (Zed's
    /// older `command: {path, args, env}`): read for plain-text secrets only.
    pub nested_args: Vec<String>,
}

impl EntryView {
    /// Scope label: `user`, `project`, or `local:<project path>` for
    /// Claude Code's per-project sections.
    pub fn scope_label(&self, project_scope: bool) -> String {
        if self.container.len() == 3 && self.container[0] == "projects" {
            format!("local:{}", self.container[1])
        } else if project_scope {
            "project".into()
        } else {
            "user".into()
        }
    }

    /// Names of env values, args and headers that look like plain-text
    /// secrets (headers as `NAME (header)`).
    pub fn secret_names(&self) -> Vec<String> {
        self.plain_secrets().into_iter().map(|(n, _)| n).collect()
    }

    /// Plain-text secret values anywhere in the entry (to redact from
    /// diffs), whether or not protect moves them.
    pub fn secret_values(&self) -> Vec<String> {
        self.plain_secrets().into_iter().map(|(_, v)| v).collect()
    }

    fn plain_secrets(&self) -> Vec<(String, String)> {
        let mut found: Vec<(String, String)> = self
            .env
            .iter()
            .filter_map(|(k, v)| {
                let v = v.as_deref()?;
                env_secret(k, v).map(|_| (k.clone(), v.to_owned()))
            })
            .collect();
        let args = match &self.kind {
            EntryKind::Stdio { args, .. } => {
                let inner = self.wrapped.as_ref().map_or(0, |w| w.inner + 1);
                &args[inner.min(args.len())..]
            }
            _ => &self.nested_args[..],
        };
        found.extend(
            find_arg_secrets(args)
                .into_iter()
                .map(|f| (f.name, args[f.arg_index][f.range].to_owned())),
        );
        found.extend(self.headers.iter().filter_map(|(k, v)| {
            header_secret(k, v.as_deref()?).map(|s| (format!("{k} (header)"), s.to_owned()))
        }));
        found
    }

    /// Why this entry cannot be wrapped, if it cannot.
    pub fn blocker(&self) -> Option<String> {
        if let Some(why) = &self.malformed {
            return Some(format!(
                "{why}; left as it is (fix the entry, then protect again)"
            ));
        }
        match &self.kind {
            EntryKind::Remote { .. } => Some("remote (url) servers are not yet protectable".into()),
            EntryKind::Extension => {
                Some("extension server started by the client itself; nothing to wrap".into())
            }
            EntryKind::Unknown => Some("entry has neither command nor url".into()),
            EntryKind::Stdio { .. } if self.remote_dev => {
                Some("runs on a remote dev host where gatehouse is not installed".into())
            }
            EntryKind::Stdio { .. } => None,
        }
    }
}

/// What Gatehouse's wrapping of an entry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapInfo {
    /// `--server` value.
    pub server_id: String,
    /// `--home` value.
    pub home: Option<String>,
    /// `--pass-env` names.
    pub pass_env: Vec<String>,
    /// Index in `args` of the original command (just after `--`).
    pub inner: usize,
}

/// True when `command` names a gatehouse binary, or the tray app's Windows
/// launcher (`gatehouse.cmd`).
pub fn is_gatehouse_exe(command: &str) -> bool {
    let base = command
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(command)
        .to_ascii_lowercase();
    matches!(
        base.as_str(),
        "gatehouse" | "gatehouse.exe" | "gatehouse.cmd" | "gatehouse.bat"
    )
}

/// Recognises `gatehouse wrap --server ID [--home H] [--pass-env A,B] -- CMD ARGS…`.
pub fn parse_wrap(command: &str, args: &[String]) -> Option<WrapInfo> {
    if !is_gatehouse_exe(command) || args.first().map(String::as_str) != Some("wrap") {
        return None;
    }
    let (mut server_id, mut home, mut pass_env) = (None, None, Vec::new());
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--" => {
                if i + 1 >= args.len() {
                    return None;
                }
                return Some(WrapInfo {
                    server_id: server_id?,
                    home,
                    pass_env,
                    inner: i + 1,
                });
            }
            "--server" => server_id = args.get(i + 1).cloned(),
            "--home" => home = args.get(i + 1).cloned(),
            "--pass-env" => pass_env.extend(
                args.get(i + 1)
                    .into_iter()
                    .flat_map(|v| v.split(','))
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            ),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    None
}

/// How one stdio entry gets wrapped.
#[derive(Debug)]
pub struct EntryPlan {
    /// Opaque server id.
    pub id: String,
    /// Env values to move: (env name = vault name, value).
    pub env_moves: Vec<(String, Secret<String>)>,
    /// Args to rewrite: (index into the original args, new text with placeholders).
    pub arg_rewrites: Vec<(usize, String)>,
    /// Secrets found inside args: (vault name, value).
    pub arg_secrets: Vec<(String, Secret<String>)>,
    /// The launch command wrap will see after `--`: [command, args…] with placeholders.
    pub argv: Vec<String>,
    /// Env names the client sets that wrap passes on.
    pub pass_env: Vec<String>,
    /// Inserted in front of the original args: `wrap --server … -- <command>`.
    pub prefix: Vec<String>,
}

impl EntryPlan {
    /// Every secret name this plan moves to the vault.
    pub fn secret_names(&self) -> Vec<String> {
        self.env_moves
            .iter()
            .chain(&self.arg_secrets)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// Plans wrapping a stdio entry with `id`. `None` for anything else.
pub fn plan_entry(view: &EntryView, id: &str, gatehouse_home: &Path) -> Option<EntryPlan> {
    let EntryKind::Stdio { command, args } = &view.kind else {
        return None;
    };
    if view.wrapped.is_some() || view.blocker().is_some() {
        return None;
    }
    let mut env_moves = Vec::new();
    let mut pass_env = Vec::new();
    for (name, value) in &view.env {
        match value.as_deref() {
            // A reserved name (`LD_PRELOAD`, `PYTHONPATH`, …: see
            // `gatehouse_vault::reserved`) stays in the config: the client
            // sets it for wrap already, and a keyring entry with that name
            // would never be injected.
            Some(v)
                if env_secret(name, v).is_some()
                    && gatehouse_vault::validate_new_name(name).is_ok() =>
            {
                env_moves.push((name.clone(), Secret::new(v.to_owned())));
            }
            _ => pass_env.push(name.clone()),
        }
    }
    for name in &view.pass_through {
        if !pass_env.contains(name) && !crate::doc::CODEX_ENV_VARS.contains(&name.as_str()) {
            pass_env.push(name.clone());
        }
    }
    let mut arg_rewrites: Vec<(usize, String)> = Vec::new();
    let mut arg_secrets = Vec::new();
    let mut new_args = args.clone();
    let mut found = find_arg_secrets(args);
    // Later spans first, so earlier ranges in the same argument stay valid.
    found.sort_by(|a, b| {
        b.arg_index
            .cmp(&a.arg_index)
            .then(b.range.start.cmp(&a.range.start))
    });
    for f in found {
        // `find_arg_secrets` names it (never a reserved name).
        let base = f.name.clone();
        let mut name = base.clone();
        let mut n = 2;
        while env_moves
            .iter()
            .chain(&arg_secrets)
            .any(|(m, _): &(String, Secret<String>)| *m == name)
        {
            name = format!("{base}_{n}");
            n += 1;
        }
        arg_secrets.push((
            name.clone(),
            Secret::new(args[f.arg_index][f.range.clone()].to_owned()),
        ));
        new_args[f.arg_index].replace_range(f.range.clone(), &placeholder(&name));
    }
    for (i, (old, new)) in args.iter().zip(&new_args).enumerate() {
        if old != new {
            arg_rewrites.push((i, new.clone()));
        }
    }
    let mut argv = vec![command.clone()];
    argv.extend(new_args);
    let mut prefix = vec![
        "wrap".into(),
        "--server".into(),
        id.to_owned(),
        "--home".into(),
        gatehouse_home.to_string_lossy().into_owned(),
    ];
    if !pass_env.is_empty() {
        prefix.push("--pass-env".into());
        prefix.push(pass_env.join(","));
    }
    prefix.push("--".into());
    prefix.push(command.clone());
    Some(EntryPlan {
        id: id.to_owned(),
        env_moves,
        arg_rewrites,
        arg_secrets,
        argv,
        pass_env,
        prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_windows_launcher_counts_as_gatehouse() {
        for command in [
            "/usr/bin/gatehouse",
            r"C:\Program Files\Gatehouse\gatehouse.exe",
            r"C:\Users\me\AppData\Local\Gatehouse\bin\gatehouse.cmd",
            "GATEHOUSE.CMD",
        ] {
            assert!(is_gatehouse_exe(command), "{command}");
        }
        for command in ["gatehouse-app", "node", "gatehouse.sh", "notgatehouse"] {
            assert!(!is_gatehouse_exe(command), "{command}");
        }
        let args = s(&["wrap", "--server", "srv_1", "--", "npx", "-y", "pkg"]);
        let wrap = parse_wrap(r"C:\G\bin\gatehouse.cmd", &args).expect("a wrap entry");
        assert_eq!(wrap.server_id, "srv_1");
    }

    fn s(items: &[&str]) -> Vec<String> {
        items.iter().map(|x| x.to_string()).collect()
    }

    /// A plain `npx` stdio entry under `mcpServers` with literal env values.
    fn npx_view(name: &str, args: &[&str], env: &[(&str, &str)]) -> EntryView {
        EntryView {
            container: s(&["mcpServers"]),
            name: name.into(),
            kind: EntryKind::Stdio {
                command: "npx".into(),
                args: s(args),
            },
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect(),
            env_file: false,
            remote_dev: false,
            malformed: None,
            headers: vec![],
            wrapped: None,
            pass_through: vec![],
            nested_args: vec![],
        }
    }

    #[test]
    fn recognises_wrapping() {
        let args = s(&[
            "wrap",
            "--server",
            "srv_1",
            "--home",
            "/h",
            "--pass-env",
            "A,B",
            "--",
            "npx",
            "-y",
            "x",
        ]);
        assert_eq!(
            parse_wrap("/opt/gatehouse/bin/gatehouse", &args),
            Some(WrapInfo {
                server_id: "srv_1".into(),
                home: Some("/h".into()),
                pass_env: s(&["A", "B"]),
                inner: 8
            })
        );
        assert!(parse_wrap(
            "C:\\Program Files\\Gatehouse\\gatehouse.exe",
            &s(&["wrap", "--server", "i", "--", "cmd"])
        )
        .is_some());
        assert!(
            parse_wrap("npx", &args).is_none(),
            "other commands are not ours"
        );
        assert!(
            parse_wrap("gatehouse", &s(&["wrap", "--", "cmd"])).is_none(),
            "no --server: not a protected entry"
        );
        assert!(
            parse_wrap("gatehouse", &s(&["wrap", "--server", "i", "--"])).is_none(),
            "no inner command"
        );
    }

    #[test]
    fn plans_moves_and_placeholders() {
        let view = npx_view(
            "pg",
            &["-y", "mcp-postgres", "postgresql://me:pw123456@db/app"],
            &[
                ("GITHUB_TOKEN", "ghp_abc"),
                ("LOG", "debug"),
                ("K", "${input:k}"),
            ],
        );
        let plan = plan_entry(&view, "srv_1", Path::new("/gh")).unwrap();
        assert_eq!(
            plan.secret_names(),
            s(&["GITHUB_TOKEN", "POSTGRESQL_PASSWORD"])
        );
        assert_eq!(
            plan.pass_env,
            s(&["LOG", "K"]),
            "non-secret names and references pass through"
        );
        assert_eq!(
            plan.argv,
            s(&[
                "npx",
                "-y",
                "mcp-postgres",
                "postgresql://me:{{vault:POSTGRESQL_PASSWORD}}@db/app"
            ])
        );
        assert_eq!(
            plan.prefix,
            s(&[
                "wrap",
                "--server",
                "srv_1",
                "--home",
                "/gh",
                "--pass-env",
                "LOG,K",
                "--",
                "npx"
            ])
        );
        assert_eq!(
            plan.arg_rewrites,
            vec![(
                2,
                "postgresql://me:{{vault:POSTGRESQL_PASSWORD}}@db/app".to_string()
            )]
        );
    }

    #[test]
    fn reserved_names_never_become_secrets() {
        let view = npx_view(
            "ld",
            &["-y", "ld-mcp", "--ld-token", "tok_0123456789abcdef"],
            &[
                ("LD_API_KEY", "api-0123456789abcdef"),
                ("GITHUB_TOKEN", "ghp_abc"),
            ],
        );
        let plan = plan_entry(&view, "srv_1", Path::new("/gh")).unwrap();
        assert_eq!(
            plan.secret_names(),
            s(&["GITHUB_TOKEN", "ARG3_SECRET"]),
            "an env value under a reserved name stays in the config; a flag \
             whose name would be reserved is stored under a neutral one"
        );
        assert_eq!(plan.pass_env, s(&["LD_API_KEY"]));
        assert_eq!(plan.argv[4], "{{vault:ARG3_SECRET}}");
    }
}
