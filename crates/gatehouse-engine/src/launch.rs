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
    let after = |word: &str| rest.iter().position(|a| a == word).map(|i| &rest[i + 1..]);
    let spec = match cmd {
        "npx" | "bunx" | "pnpx" => package_of(rest, NPM_PACKAGE),
        "uvx" => package_of(rest, UV_PACKAGE),
        "pipx" => after("run").and_then(|args| package_of(args, PIPX_PACKAGE)),
        "uv" => after("tool")
            .and_then(|args| args.strip_prefix(&["run".to_string()]))
            .and_then(|args| package_of(args, UV_PACKAGE)),
        "pnpm" | "yarn" | "npm" => rest
            .iter()
            .position(|a| a == "dlx" || a == "exec")
            .and_then(|i| package_of(&rest[i + 1..], NPM_PACKAGE)),
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

/// The option that names the package to install when the first positional
/// argument is only the command to run it with (`npx -p PKG cmd`,
/// `uvx --from PKG cmd`, `pipx run --spec PKG cmd`).
const NPM_PACKAGE: &[&str] = &["-p", "--package"];
const UV_PACKAGE: &[&str] = &["--from"];
const PIPX_PACKAGE: &[&str] = &["--spec"];

/// The package a runner installs: the value of its package option (`-p X`
/// or `--package=X`; the first when repeated) before the command, else the
/// command, its first positional argument.
fn package_of(args: &[String], package_options: &[&str]) -> Option<String> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if let Some((opt, value)) = arg.split_once('=').filter(|(o, _)| o.starts_with("--")) {
            if package_options.contains(&opt) {
                return Some(value.to_string());
            }
        } else if package_options.contains(&arg.as_str()) {
            return args.next().cloned();
        } else if VALUE_OPTIONS.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg.clone());
        }
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
            Some("git+https://x"),
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

    /// The package installed, not the command run from it.
    #[test]
    fn package_options_name_the_package() {
        let squat = "@modelcontextprotocol/server-filesytem";
        for argv in [
            &["npx", "-y", "-p", squat, "mcp-server-filesystem", "/tmp"][..],
            &["npx", "--package", squat, "mcp-server-filesystem"],
            &[
                "npx",
                &format!("--package={squat}"),
                "-y",
                "mcp-server-filesystem",
            ],
            &[
                "npm",
                "exec",
                "--package",
                squat,
                "--",
                "mcp-server-filesystem",
            ],
        ] {
            check(argv, None, Some(squat), true);
        }
        for argv in [
            &["uvx", "--from", "mcp-server-fech", "mcp-server-fetch"][..],
            &["uvx", "--from=mcp-server-fech", "mcp-server-fetch"],
            &[
                "uv",
                "tool",
                "run",
                "--from",
                "mcp-server-fech",
                "mcp-server-fetch",
            ],
            &[
                "pipx",
                "run",
                "--spec",
                "mcp-server-fech",
                "mcp-server-fetch",
            ],
            &["pipx", "run", "--spec=mcp-server-fech", "mcp-server-fetch"],
        ] {
            check(argv, None, Some("mcp-server-fech"), true);
        }
        check(
            &["uvx", "-p", "3.12", "mcp-server-time"],
            None,
            Some("mcp-server-time"),
            true,
        );
        check(
            &["pipx", "run", "--python", "python3.12", "mcp-server-fetch"],
            None,
            Some("mcp-server-fetch"),
            true,
        );
    }
}
