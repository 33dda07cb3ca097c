//! Launch pinning (change detection, not a defence — DESIGN §6): what a
//! launch command runs, read from its argv alone. The host hashes the files.

/// What an argv launches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchFacts {
    /// A script run by a known interpreter (`node x.js`, `python x.py`).
    pub script: Option<String>,
    /// A package fetched by a package runner (`npx`, `uvx`, `pipx run`).
    pub package: Option<String>,
    /// The package spec names no version: whatever is latest will run.
    pub unversioned: bool,
}

const INTERPRETERS: &[&str] = &[
    "node", "nodejs", "python", "python3", "deno", "bun", "ruby", "perl", "php",
];

fn base_name(path: &str) -> &str {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    name.strip_suffix(".exe")
        .or_else(|| name.strip_suffix(".cmd"))
        .unwrap_or(name)
}

/// Reads the script or package an argv launches.
pub fn launch_facts(argv: &[String]) -> LaunchFacts {
    let mut facts = LaunchFacts {
        script: None,
        package: None,
        unversioned: false,
    };
    let Some(cmd) = argv.first() else {
        return facts;
    };
    let cmd = base_name(cmd);
    let rest = &argv[1..];
    let interp = INTERPRETERS.contains(&cmd) || cmd.starts_with("python3.");
    if interp {
        facts.script = rest.iter().find(|a| !a.starts_with('-')).cloned();
        return facts;
    }
    let spec = match cmd {
        "npx" | "bunx" | "uvx" | "pnpx" => first_positional(rest),
        "pipx" => rest
            .iter()
            .position(|a| a == "run")
            .and_then(|i| first_positional(&rest[i + 1..])),
        "uv" => rest
            .iter()
            .position(|a| a == "tool")
            .filter(|i| rest.get(i + 1).map(String::as_str) == Some("run"))
            .and_then(|i| first_positional(&rest[i + 2..])),
        "pnpm" | "yarn" | "npm" => rest
            .iter()
            .position(|a| a == "dlx" || a == "exec")
            .and_then(|i| first_positional(&rest[i + 1..])),
        _ => None,
    };
    if let Some(spec) = spec {
        facts.unversioned = !is_versioned(&spec);
        facts.package = Some(spec);
    }
    facts
}

/// Options of package runners that take a value.
const VALUE_OPTIONS: &[&str] = &[
    "-p",
    "--package",
    "--from",
    "--python",
    "--with",
    "--registry",
    "--index-url",
    "-c",
    "--call",
];

fn first_positional(args: &[String]) -> Option<String> {
    let mut skip = false;
    for arg in args {
        if skip {
            skip = false;
            continue;
        }
        if VALUE_OPTIONS.contains(&arg.as_str()) {
            skip = true;
            continue;
        }
        if arg.starts_with('-') {
            continue;
        }
        return Some(arg.clone());
    }
    None
}

/// `pkg@1.2.3`, `@scope/pkg@1.2.3`, `pkg==1.2`, `pkg@latest` (not pinned).
fn is_versioned(spec: &str) -> bool {
    if spec.contains("==") {
        return true;
    }
    let name_and_version = spec.strip_prefix('@').unwrap_or(spec);
    match name_and_version.split_once('@') {
        Some((_, version)) => !version.is_empty() && version != "latest" && version != "next",
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(argv: &[&str], script: Option<&str>, package: Option<&str>, unversioned: bool) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let facts = launch_facts(&argv);
        assert_eq!(
            facts,
            LaunchFacts {
                script: script.map(str::to_string),
                package: package.map(str::to_string),
                unversioned
            },
            "argv {argv:?}"
        );
    }

    #[test]
    fn reads_scripts_and_packages() {
        check(
            &["node", "dist/index.js"],
            Some("dist/index.js"),
            None,
            false,
        );
        check(
            &["/usr/bin/python3", "-u", "server.py"],
            Some("server.py"),
            None,
            false,
        );
        check(
            &["npx", "-y", "@modelcontextprotocol/server-everything"],
            None,
            Some("@modelcontextprotocol/server-everything"),
            true,
        );
        check(
            &[
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything@2026.8.31",
            ],
            None,
            Some("@modelcontextprotocol/server-everything@2026.8.31"),
            false,
        );
        check(
            &["uvx", "mcp-server-time==2026.10.19"],
            None,
            Some("mcp-server-time==2026.10.19"),
            false,
        );
        check(
            &["uvx", "--from", "git+https://x", "mcp-server-git"],
            None,
            Some("mcp-server-git"),
            true,
        );
        check(
            &["pipx", "run", "mcp-server-fetch"],
            None,
            Some("mcp-server-fetch"),
            true,
        );
        check(&["npx.cmd", "pkg@latest"], None, Some("pkg@latest"), true);
        check(&["/opt/bin/server", "--stdio"], None, None, false);
    }
}
