//! Secret names that are never injected: environment variables that choose
//! what code a loader, interpreter or shell runs before (or instead of) the
//! server's own.
//!
//! Every secret stored for a server reaches its environment under the
//! secret's name, so whoever can store a secret (a dashboard session, a
//! careless `gatehouse vault set`) could otherwise turn one into code
//! execution in the wrapped server: `LD_PRELOAD=/tmp/x.so`,
//! `PYTHONPATH=/tmp/x` (a `sitecustomize.py`), `NODE_OPTIONS=--require …`.
//! A value held in a keyring is never such a setting, so these names are
//! refused when a secret is stored ([`crate::validate_new_name`]: the CLI,
//! the API and protect) and skipped when wrap injects
//! ([`reserved_env_name`]), for entries stored before this rule.
//!
//! The rule: a name is reserved when a dynamic loader, a language runtime,
//! a shell or a tool servers commonly run (git, ssh, npm, the JVM) reads it
//! as code to load, a place to load code from, options to start with, or a
//! command to run. Whole namespaces are reserved where the program owns
//! them (`LD_*`, `DYLD_*`, `PYTHON*`, `GIT_CONFIG*`, `npm_config_*`,
//! `BASH_FUNC_*`); elsewhere the exact names. Names compare ASCII
//! case-insensitively (Windows' environment is case-insensitive, and npm
//! reads `npm_config_*` in either case).
//!
//! Not reserved: names that only carry data a server reads as data
//! (`NODE_ENV`, `GITHUB_TOKEN`, `NODE_AUTH_TOKEN`); names that choose where
//! a server connects or which certificates it trusts (`HTTPS_PROXY`,
//! `SSL_CERT_FILE`, `PIP_INDEX_URL`), which a proxy's credentials may
//! legitimately be stored as, and which redirect traffic but run no code
//! by themselves; and the policy's own
//! per-server `env` names, which the policy file sets (a
//! `NAME = "vault:SECRET"` entry is how a secret reaches a server under
//! a reserved-looking name such as LaunchDarkly's `LD_API_KEY`).

/// Reserved prefixes (upper case) and what reads them.
const PREFIXES: &[(&str, &str)] = &[
    ("LD_", "the dynamic loader (LD_*)"),
    ("DYLD_", "the macOS dynamic loader (DYLD_*)"),
    ("PYTHON", "the Python interpreter (PYTHON*)"),
    ("BASH_FUNC_", "bash (exported functions)"),
    ("GIT_CONFIG", "git (configuration: GIT_CONFIG*)"),
    ("NPM_CONFIG_", "npm (npm_config_*)"),
    ("CORECLR_", ".NET (profilers: CORECLR_*)"),
    ("COR_", ".NET Framework (profilers: COR_*)"),
];

/// Reserved names (upper case) and what reads them.
const NAMES: &[(&str, &str)] = &[
    // Every program: where commands are found, how words split, where its
    // configuration is (git, npm, pip and ssh read theirs there; a git
    // config can name commands: core.fsmonitor, core.pager).
    ("PATH", "every program (command search path)"),
    (
        "HOME",
        "every program (its configuration: ~/.gitconfig, ~/.npmrc)",
    ),
    (
        "XDG_CONFIG_HOME",
        "every program (its configuration: git/config)",
    ),
    ("XDG_CONFIG_DIRS", "every program (its configuration)"),
    ("XDG_DATA_HOME", "every program (its data and plug-ins)"),
    ("XDG_DATA_DIRS", "every program (its data and plug-ins)"),
    // Commands programs run for a person.
    ("EDITOR", "programs that open an editor (a command)"),
    ("VISUAL", "programs that open an editor (a command)"),
    ("PAGER", "programs that page output (a command)"),
    ("LESSOPEN", "less (a command it runs)"),
    ("LESSCLOSE", "less (a command it runs)"),
    ("BROWSER", "programs that open a browser (a command)"),
    ("SHELL", "programs that start a shell (a command)"),
    ("PATHEXT", "Windows (command search)"),
    ("COMSPEC", "Windows (command interpreter)"),
    ("IFS", "the shell (word splitting)"),
    // glibc, beyond LD_*.
    ("GCONV_PATH", "glibc (loads iconv modules)"),
    ("GLIBC_TUNABLES", "glibc (loader tunables)"),
    // Shells.
    ("BASH_ENV", "bash (a file it runs at start)"),
    ("ENV", "sh (a file it runs at start)"),
    ("SHELLOPTS", "bash (start options)"),
    ("BASHOPTS", "bash (start options)"),
    ("PS4", "bash (expanded when tracing)"),
    ("PROMPT_COMMAND", "bash (a command it runs)"),
    ("ZDOTDIR", "zsh (where its start files are)"),
    // Node.js.
    ("NODE_OPTIONS", "Node.js (start options, --require)"),
    ("NODE_PATH", "Node.js (module search path)"),
    ("NODE_REPL_EXTERNAL_MODULE", "Node.js (a module it loads)"),
    // Perl, Ruby, Lua, PHP.
    ("PERL5LIB", "Perl (module search path)"),
    ("PERLLIB", "Perl (module search path)"),
    ("PERL5OPT", "Perl (start options)"),
    ("PERL5DB", "Perl (debugger code)"),
    ("RUBYOPT", "Ruby (start options)"),
    ("RUBYLIB", "Ruby (library search path)"),
    ("LUA_INIT", "Lua (code it runs at start)"),
    ("LUA_PATH", "Lua (module search path)"),
    ("LUA_CPATH", "Lua (native module search path)"),
    ("PHPRC", "PHP (its php.ini)"),
    ("PHP_INI_SCAN_DIR", "PHP (more php.ini files)"),
    // The JVM and .NET.
    ("JAVA_TOOL_OPTIONS", "the JVM (start options, agents)"),
    ("_JAVA_OPTIONS", "the JVM (start options, agents)"),
    ("JDK_JAVA_OPTIONS", "the JVM (start options, agents)"),
    ("CLASSPATH", "the JVM (class search path)"),
    (
        "DOTNET_STARTUP_HOOKS",
        ".NET (assemblies it loads at start)",
    ),
    // git and ssh, which servers run.
    ("GIT_SSH", "git (the ssh command it runs)"),
    ("GIT_SSH_COMMAND", "git (the ssh command it runs)"),
    ("GIT_EXEC_PATH", "git (where its commands are)"),
    ("GIT_ASKPASS", "git (a command it runs)"),
    ("GIT_PROXY_COMMAND", "git (a command it runs)"),
    ("GIT_EXTERNAL_DIFF", "git (a command it runs)"),
    ("GIT_PAGER", "git (a command it runs)"),
    ("GIT_EDITOR", "git (a command it runs)"),
    ("GIT_SEQUENCE_EDITOR", "git (a command it runs)"),
    (
        "GIT_TEMPLATE_DIR",
        "git (hooks copied into new repositories)",
    ),
    ("GIT_DIR", "git (which repository, and so its hooks)"),
    ("SSH_ASKPASS", "ssh (a command it runs)"),
];

/// What reads `name` when it is reserved (for the error and the event),
/// `None` when a secret may carry it into a server's environment.
pub fn reserved_env_name(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    NAMES
        .iter()
        .find(|(n, _)| *n == upper)
        .or_else(|| PREFIXES.iter().find(|(p, _)| upper.starts_with(p)))
        .map(|(_, what)| *what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, reserved: bool) {
        assert_eq!(
            reserved_env_name(name).is_some(),
            reserved,
            "{name}: {}",
            if reserved {
                "controls what code runs, so a secret must not carry it"
            } else {
                "is data a server reads, so it may be a secret"
            }
        );
    }

    #[test]
    fn loader_interpreter_and_shell_names_are_reserved() {
        for name in [
            "XDG_CONFIG_HOME",
            "HOME",
            "EDITOR",
            "LESSOPEN",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "ld_preload",
            "DYLD_INSERT_LIBRARIES",
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "PYTHONINSPECT",
            "PYTHONBREAKPOINT",
            "PYTHONWARNINGS",
            "NODE_OPTIONS",
            "NODE_PATH",
            "PERL5LIB",
            "PERL5OPT",
            "PERLLIB",
            "RUBYOPT",
            "RUBYLIB",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "PS4",
            "JAVA_TOOL_OPTIONS",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "GIT_SSH_COMMAND",
            "GIT_EXEC_PATH",
            "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0",
            "npm_config_node_options",
            "PATH",
            "Path",
            "IFS",
            "GCONV_PATH",
            "GLIBC_TUNABLES",
        ] {
            check(name, true);
        }
    }

    #[test]
    fn data_names_are_not_reserved() {
        for name in [
            "GITHUB_TOKEN",
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "OPENAI_API_KEY",
            "NODE_ENV",
            "NODE_AUTH_TOKEN",
            "GIT_TOKEN",
            "DATABASE_URL",
            "ENVIRONMENT",
            "PATH_PREFIX",
            "API_KEY",
            "CORE_TOKEN",
        ] {
            check(name, false);
        }
    }
}
