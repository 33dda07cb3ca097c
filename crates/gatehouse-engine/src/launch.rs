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
    /// Further packages the runner installs beside `package` (a second
    /// `npx -p`, `uvx --with`): judged for typosquatting too.
    pub also_installed: Vec<String>,
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
        also_installed: Vec::new(),
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
    let installed = match cmd {
        "npx" | "bunx" | "pnpx" => Some(packages_of(rest, NPM_PACKAGE)),
        "uvx" => Some(packages_of(rest, UV_PACKAGE)),
        "pipx" => after("run").map(|args| packages_of(args, PIPX_PACKAGE)),
        "uv" => after("tool")
            .and_then(|args| args.strip_prefix(&["run".to_string()]))
            .map(|args| packages_of(args, UV_PACKAGE)),
        "pnpm" | "yarn" | "npm" => rest
            .iter()
            .position(|a| a == "dlx" || a == "exec")
            .map(|i| packages_of(&rest[i + 1..], NPM_PACKAGE)),
        _ => None,
    };
    let mut installed = installed.unwrap_or_default().into_iter();
    let spec = installed.next();
    facts.also_installed = installed.collect();
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

/// Options that add a package beside the one run (`uvx --with X`).
const WITH_PACKAGE: &[&str] = &["--with"];

/// The packages a runner installs, the one it runs first: the values of
/// its package options (`-p X`, `-p=X`, `--package=X`, each one given)
/// before the command, else the command itself (its first positional
/// argument); then what `--with` adds. Nothing after the command is read.
fn packages_of(args: &[String], package_options: &[&str]) -> Vec<String> {
    let (mut named, mut with) = (Vec::new(), Vec::new());
    let mut command = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (opt, inline) = match arg.split_once('=') {
            Some((opt, value)) if opt.starts_with('-') => (opt, Some(value.to_string())),
            _ => (arg.as_str(), None),
        };
        let into = if package_options.contains(&opt) {
            Some(&mut named)
        } else if WITH_PACKAGE.contains(&opt) {
            Some(&mut with)
        } else {
            None
        };
        if let Some(list) = into {
            list.extend(inline.or_else(|| args.next().cloned()));
        } else if VALUE_OPTIONS.contains(&opt) {
            if inline.is_none() {
                args.next();
            }
        } else if !arg.starts_with('-') {
            command = Some(arg.clone());
            break;
        }
    }
    if named.is_empty() {
        named.extend(command);
    }
    named.extend(with);
    named
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
            (facts.script, facts.package, facts.unversioned),
            (
                script.map(str::to_string),
                package.map(str::to_string),
                unversioned
            ),
            "argv {argv:?}"
        );
    }

    /// Every package a runner installs is read, in every spelling npm and
    /// uv accept; the server's own arguments are not.
    #[test]
    fn every_installed_package_is_read() {
        for (argv, want) in [
            ("npx -p=@scope/squat cmd", vec!["@scope/squat"]),
            (
                "npx -y -p @scope/real -p @scope/squat cmd",
                vec!["@scope/real", "@scope/squat"],
            ),
            (
                "npx --package=a --package b cmd -p not-a-package",
                vec!["a", "b"],
            ),
            (
                "uvx --with mcp-server-fech mcp-server-fetch",
                vec!["mcp-server-fetch", "mcp-server-fech"],
            ),
            ("uvx --from x --with=y cmd --with z", vec!["x", "y"]),
            ("uvx --python=3.12 mcp-server-time", vec!["mcp-server-time"]),
        ] {
            let argv: Vec<String> = argv.split(' ').map(str::to_string).collect();
            let facts = launch_facts(&argv);
            let got: Vec<String> = facts
                .package
                .into_iter()
                .chain(facts.also_installed)
                .collect();
            assert_eq!(got, want, "{argv:?}");
        }
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
