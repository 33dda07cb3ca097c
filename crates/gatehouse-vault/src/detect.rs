//! Secret detection: which env names, env values and argument spans in a
//! client config look like secrets. Heuristic by nature; every rule is in a
//! table test below.

use std::ops::Range;

/// Why something was taken for a secret. Names only; never carries a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    /// The variable or flag name says so (`*_TOKEN`, `DATABASE_URL`, …).
    Named,
    /// `ghp_…`, `gho_…`, `github_pat_…`.
    GitHubToken,
    /// `sk-…` (OpenAI, Anthropic and look-alikes).
    SkKey,
    /// `xoxb-…`, `xoxp-…`.
    SlackToken,
    /// `AKIA` + 16 upper-case alphanumerics.
    AwsAccessKey,
    /// `eyJ….….…`.
    Jwt,
    /// `-----BEGIN …-----`.
    PemBlock,
    /// Long, mixed-case, high-entropy token.
    HighEntropy,
    /// The password of `scheme://user:password@host`.
    ConnectionString,
    /// An `Authorization` value: `Bearer …`, `Basic …`, `Token …`.
    AuthScheme,
}

impl SecretKind {
    /// Stable lower-case label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::Named => "named",
            Self::GitHubToken => "github_token",
            Self::SkKey => "sk_key",
            Self::SlackToken => "slack_token",
            Self::AwsAccessKey => "aws_access_key",
            Self::Jwt => "jwt",
            Self::PemBlock => "pem_block",
            Self::HighEntropy => "high_entropy",
            Self::ConnectionString => "connection_string",
            Self::AuthScheme => "auth_scheme",
        }
    }
}

const NAME_SUFFIXES: &[&str] = &[
    "_TOKEN",
    "_KEY",
    "_SECRET",
    "_PASSWORD",
    "_CREDENTIALS",
    "_APIKEY",
    "_PAT",
    "_PASS",
    "_PASSWD",
    "_PWD",
    "_AUTH",
    "_AUTHORIZATION",
    "_CONNECTION_STRING",
];
const EXACT_NAMES: &[&str] = &[
    "DATABASE_URL",
    "PGPASSWORD",
    "TOKEN",
    "PASSWORD",
    "SECRET",
    "APIKEY",
    "API_KEY",
    "CREDENTIALS",
    "AUTHORIZATION",
    "CONNECTION_STRING",
];

/// True for names that hold secrets by convention (case-insensitive;
/// dashes count as underscores so `--api-key` matches too).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name
        .trim_start_matches('-')
        .replace('-', "_")
        .to_ascii_uppercase();
    EXACT_NAMES.contains(&upper.as_str()) || NAME_SUFFIXES.iter().any(|s| upper.ends_with(s))
}

/// True for values that refer to a secret held elsewhere rather than
/// containing one: `${VAR}`, `${env:X}`, `${input:id}`, `$VAR`, `{{vault:X}}`.
pub fn is_reference(value: &str) -> bool {
    let v = value.trim();
    (v.starts_with("${") && v.ends_with('}'))
        || (v.starts_with("{{") && v.ends_with("}}"))
        || (v.starts_with('$')
            && v.len() > 1
            && v[1..]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

/// Classifies a value by its shape alone.
pub fn classify_value(value: &str) -> Option<SecretKind> {
    let v = value.trim();
    if v.is_empty() || is_reference(v) {
        return None;
    }
    if v.contains("-----BEGIN ") {
        return Some(SecretKind::PemBlock);
    }
    let token_tail = |prefix: &str, min: usize| {
        v.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= min
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
    };
    if ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]
        .iter()
        .any(|p| token_tail(p, 20))
        || token_tail("github_pat_", 20)
    {
        return Some(SecretKind::GitHubToken);
    }
    if token_tail("sk-", 20) {
        return Some(SecretKind::SkKey);
    }
    if token_tail("xoxb-", 10) || token_tail("xoxp-", 10) {
        return Some(SecretKind::SlackToken);
    }
    if v.len() == 20
        && v.starts_with("AKIA")
        && v[4..]
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    {
        return Some(SecretKind::AwsAccessKey);
    }
    if is_jwt(v) {
        return Some(SecretKind::Jwt);
    }
    if is_high_entropy(v) {
        return Some(SecretKind::HighEntropy);
    }
    None
}

fn is_jwt(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts[0].starts_with("eyJ")
        && parts.iter().all(|p| {
            p.len() >= 4
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// Shannon entropy in bits per character.
pub fn shannon_entropy(s: &str) -> f64 {
    let mut counts = [0usize; 256];
    for b in s.bytes() {
        counts[b as usize] += 1;
    }
    let n = s.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// At least 20 token characters, upper, lower and digits all present, and
/// ≥ 3.5 bits of entropy per character. Paths, URLs, package names, UUIDs
/// and hex digests do not qualify.
fn is_high_entropy(v: &str) -> bool {
    v.len() >= 20
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'=' | b'_' | b'-'))
        && v.bytes().any(|b| b.is_ascii_uppercase())
        && v.bytes().any(|b| b.is_ascii_lowercase())
        && v.bytes().any(|b| b.is_ascii_digit())
        && shannon_entropy(v) >= 3.5
}

/// Whether an env entry holds a secret value: a secret-looking name with a
/// literal (non-reference, non-empty) value, a secret-shaped value, a URL
/// carrying a password (`MDB_MCP_CONNECTION_STRING=mongodb+srv://u:pw@…`),
/// or an `Authorization` value (`Bearer …`).
pub fn env_secret(name: &str, value: &str) -> Option<SecretKind> {
    if value.trim().is_empty() || is_reference(value) {
        return None;
    }
    // `Bearer ${TOKEN}`: the client fills it in; moved, it would not.
    let scheme_then_reference = value.trim().split_once(' ').is_some_and(|(scheme, rest)| {
        scheme.bytes().all(|b| b.is_ascii_alphabetic()) && is_reference(rest)
    });
    if scheme_then_reference {
        return None;
    }
    classify_value(value)
        .or_else(|| connection_password(value.trim()).map(|_| SecretKind::ConnectionString))
        .or_else(|| auth_scheme_value(value).then_some(SecretKind::AuthScheme))
        .or_else(|| is_secret_name(name).then_some(SecretKind::Named))
}

/// `Bearer …`, `Basic …`, `Token …`, `Bot …`: a scheme and one credential
/// word of at least 8 characters that is not a reference.
fn auth_scheme_value(value: &str) -> bool {
    value
        .trim()
        .split_once(' ')
        .is_some_and(|(scheme, credentials)| {
            let credentials = credentials.trim();
            ["bearer", "basic", "token", "bot"]
                .iter()
                .any(|s| scheme.eq_ignore_ascii_case(s))
                && credentials.len() >= 8
                && !credentials.contains(char::is_whitespace)
                && !is_reference(credentials)
        })
}

/// The secret in an HTTP header value, if it holds one: the credentials of
/// `Authorization`-style headers (after a `Bearer `/`Basic ` scheme), or a
/// value that is secret by its header name or its shape.
pub fn header_secret<'v>(name: &str, value: &'v str) -> Option<&'v str> {
    let credentials = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.bytes().all(|b| b.is_ascii_alphabetic()))
        .map_or(value, |(_, rest)| rest)
        .trim();
    let auth_header = name.eq_ignore_ascii_case("authorization")
        || name.eq_ignore_ascii_case("proxy-authorization");
    let secret = if auth_header {
        !credentials.is_empty() && !is_reference(credentials)
    } else {
        env_secret(name, credentials).is_some()
    };
    secret.then_some(credentials)
}

/// The secret span of a header given as one argument, `Name: value` (as
/// `mcp-remote --header` and `curl -H` take it), and the header's name.
fn header_arg_secret(arg: &str) -> Option<(Range<usize>, &str)> {
    let (name, value) = arg.split_once(':')?;
    let name = name.trim();
    let token = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if name.is_empty() || !name.bytes().all(token) {
        return None;
    }
    let credentials = header_secret(name, value.trim())?;
    // A sub-slice of `arg`: its offset is where the secret starts.
    let start = credentials.as_ptr() as usize - arg.as_ptr() as usize;
    Some((start..start + credentials.len(), name))
}

/// The spans of secret-named query parameters (`?api_key=…&token=…`) of a
/// URL argument, with their names.
fn query_secrets(arg: &str) -> Vec<(Range<usize>, &str)> {
    let Some(query_start) = arg
        .find("://")
        .and_then(|at| Some(at + arg[at..].find('?')? + 1))
    else {
        return Vec::new();
    };
    let query_end = arg[query_start..]
        .find('#')
        .map_or(arg.len(), |end| query_start + end);
    let mut found = Vec::new();
    let mut at = query_start;
    for pair in arg[query_start..query_end].split('&') {
        if let Some((name, value)) = pair.split_once('=') {
            if is_secret_name(name) && !value.is_empty() && !is_reference(value) {
                let start = at + name.len() + 1;
                found.push((start..start + value.len(), name));
            }
        }
        at += pair.len() + 1;
    }
    found
}

/// A secret inside one argument: `args[arg_index][range]`, to be moved to
/// the vault under `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgSecret {
    /// Index into the args list.
    pub arg_index: usize,
    /// Byte range of the secret within that argument.
    pub range: Range<usize>,
    /// Why it was taken for a secret.
    pub kind: SecretKind,
    /// Suggested vault name (unique within the list returned).
    pub name: String,
}

/// Finds secrets inside `args`: values of secret flags (`--api-key X`,
/// `--token=X`), `NAME=value` pairs with secret names (`-e TOKEN=…`),
/// connection-string passwords, and secret-shaped whole arguments.
pub fn find_arg_secrets(args: &[String]) -> Vec<ArgSecret> {
    let mut found: Vec<ArgSecret> = Vec::new();
    let mut push = |arg_index: usize, range: Range<usize>, kind: SecretKind, base: String| {
        // Every stored secret reaches the server's environment by name: a
        // flag whose name would be a reserved one (`--ld-token` →
        // `LD_TOKEN`) gets a neutral name instead.
        let base = match crate::validate_new_name(&base) {
            Ok(()) => base,
            Err(_) => format!("ARG{arg_index}_SECRET"),
        };
        let mut name = base.clone();
        let mut n = 2;
        while found.iter().any(|f| f.name == name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        found.push(ArgSecret {
            arg_index,
            range,
            kind,
            name,
        });
    };
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        // `--header "Authorization: Bearer …"` (mcp-remote), `-H …`.
        let header = match arg.as_str() {
            "--header" | "-H" => args.get(i + 1).map(|value| (i + 1, 0, value.as_str())),
            _ => arg
                .strip_prefix("--header=")
                .map(|value| (i, arg.len() - value.len(), value)),
        };
        if let Some((at, offset, value)) = header {
            if let Some((range, name)) = header_arg_secret(value) {
                let range = range.start + offset..range.end + offset;
                push(at, range, SecretKind::Named, env_name(name));
            }
            i = at + 1;
            continue;
        }
        let queried = query_secrets(arg);
        if !queried.is_empty() {
            if let Some((range, scheme)) = connection_password(arg) {
                let name = format!("{}_PASSWORD", env_name(scheme));
                push(i, range, SecretKind::ConnectionString, name);
            }
            for (range, name) in queried {
                push(i, range, SecretKind::Named, env_name(name));
            }
            i += 1;
            continue;
        }
        if let Some(flag) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-').filter(|f| f.len() > 1))
        {
            if let Some((fname, value)) = flag.split_once('=') {
                if is_secret_name(fname) && !value.is_empty() && !is_reference(value) {
                    let start = arg.len() - value.len();
                    push(i, start..arg.len(), SecretKind::Named, env_name(fname));
                    i += 1;
                    continue;
                }
            } else if is_secret_name(flag) && !flag.contains('=') {
                if let Some(value) = args.get(i + 1) {
                    if !value.starts_with('-') && !value.is_empty() && !is_reference(value) {
                        push(i + 1, 0..value.len(), SecretKind::Named, env_name(flag));
                        i += 2;
                        continue;
                    }
                }
            }
        }
        if let Some((name, value)) = arg.split_once('=') {
            let plain_name =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if plain_name && is_secret_name(name) && !value.is_empty() && !is_reference(value) {
                push(
                    i,
                    name.len() + 1..arg.len(),
                    SecretKind::Named,
                    env_name(name),
                );
                i += 1;
                continue;
            }
        }
        if let Some((range, scheme)) = connection_password(arg) {
            push(
                i,
                range,
                SecretKind::ConnectionString,
                format!("{}_PASSWORD", env_name(scheme)),
            );
        } else if let Some((start, kind)) = shaped_after_eq(arg) {
            // A secret-shaped value after any `NAME=` or `--flag=`
            // (`FOO=ghp_…`): only the value moves, as after a space.
            push(i, start..arg.len(), kind, format!("ARG{i}_SECRET"));
        } else if let Some(kind) = classify_value(arg) {
            push(i, 0..arg.len(), kind, format!("ARG{i}_SECRET"));
        }
        i += 1;
    }
    found
}

/// Where a secret-shaped value after the first `=` of `arg` starts.
fn shaped_after_eq(arg: &str) -> Option<(usize, SecretKind)> {
    let (name, value) = arg.split_once('=')?;
    if is_reference(value) {
        return None;
    }
    classify_value(value).map(|kind| (name.len() + 1, kind))
}

fn env_name(s: &str) -> String {
    s.trim_start_matches('-')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The password span of `scheme://user:password@host…`, with the scheme.
pub fn connection_password(s: &str) -> Option<(Range<usize>, &str)> {
    let sep = s.find("://")?;
    let scheme = &s[..sep];
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
    {
        return None;
    }
    let auth_start = sep + 3;
    let rest = &s[auth_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let at = authority.rfind('@')?;
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        // `https://ghp_…@github.com/…`: a token in the user's place.
        classify_value(userinfo)?;
        return Some((
            auth_start..auth_start + userinfo.len(),
            scheme.split('+').next().unwrap_or(scheme),
        ));
    };
    let password = &userinfo[colon + 1..];
    if password.is_empty() || is_reference(password) {
        return None;
    }
    let start = auth_start + colon + 1;
    Some((
        start..start + password.len(),
        scheme.split('+').next().unwrap_or(scheme),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_value(value: &str, expect: Option<SecretKind>) {
        assert_eq!(classify_value(value), expect, "classify_value({value:?})");
    }

    #[test]
    fn value_shapes() {
        check_value(
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
            Some(SecretKind::GitHubToken),
        );
        check_value(
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            Some(SecretKind::GitHubToken),
        );
        check_value(
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            Some(SecretKind::SkKey),
        );
        check_value("xoxb-123456789012-abcdefghij", Some(SecretKind::SlackToken));
        check_value("AKIAIOSFODNN7EXAMPLE", Some(SecretKind::AwsAccessKey));
        check_value(
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl",
            Some(SecretKind::Jwt),
        );
        check_value(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END",
            Some(SecretKind::PemBlock),
        );
        check_value("Zk3Qx9Lm2Pv8Rt5Wy7Bn4Hc6", Some(SecretKind::HighEntropy));
        // Not secrets.
        check_value("ghp_short", None);
        check_value("sk-", None);
        check_value("${GITHUB_TOKEN}", None);
        check_value("${input:pplx}", None);
        check_value("{{vault:TOKEN}}", None);
        check_value("$GITHUB_TOKEN", None);
        check_value("@modelcontextprotocol/server-github", None);
        check_value("/home/me/src/project", None);
        check_value("https://api.example.com/mcp", None);
        check_value("123e4567-e89b-12d3-a456-426614174000", None);
        check_value("da39a3ee5e6b4b0d3255bfef95601890afd80709", None);
        check_value("production", None);
        check_value("mcp-server-postgres", None);
    }

    #[test]
    fn names() {
        for (name, expect) in [
            ("GITHUB_TOKEN", true),
            ("github_personal_access_token", true),
            ("OPENAI_API_KEY", true),
            ("CLIENT_SECRET", true),
            ("DB_PASSWORD", true),
            ("GOOGLE_APPLICATION_CREDENTIALS", true),
            ("DATABASE_URL", true),
            ("PGPASSWORD", true),
            ("--api-key", true),
            ("token", true),
            ("LOG_LEVEL", false),
            ("PATH", false),
            ("KEYBOARD", false),
            ("TOKENIZER", false),
        ] {
            assert_eq!(is_secret_name(name), expect, "is_secret_name({name:?})");
        }
    }

    #[test]
    fn env_entries() {
        assert_eq!(env_secret("GITHUB_TOKEN", "abc"), Some(SecretKind::Named));
        assert_eq!(
            env_secret("GITHUB_TOKEN", "${GITHUB_TOKEN}"),
            None,
            "references stay"
        );
        assert_eq!(env_secret("GITHUB_TOKEN", ""), None, "empty values stay");
        assert_eq!(
            env_secret("SOME_VAR", "ghp_0123456789abcdefghijABCDEF"),
            Some(SecretKind::GitHubToken)
        );
        assert_eq!(env_secret("LOG_LEVEL", "debug"), None);
        for (name, value, kind) in [
            (
                "MDB_MCP_CONNECTION_STRING",
                "mongodb+srv://admin:Hunter2Pass@c.example.net/app",
                SecretKind::ConnectionString,
            ),
            (
                "REDIS_URL",
                "redis://default:pw@localhost:6379",
                SecretKind::ConnectionString,
            ),
            (
                "AUTHORIZATION",
                "Bearer 9f8e7d6c5b4a",
                SecretKind::AuthScheme,
            ),
            ("HEADERS_AUTH", "basic dXNlcjpwYXNz", SecretKind::AuthScheme),
            ("MYSQL_PASS", "hunter2", SecretKind::Named),
            ("DB_PWD", "hunter2", SecretKind::Named),
            ("AUTHORIZATION", "hunter2", SecretKind::Named),
        ] {
            assert_eq!(env_secret(name, value), Some(kind), "{name}={value}");
        }
        for (name, value) in [
            ("REDIS_URL", "redis://localhost:6379"),
            ("AUTHORIZATION", "Bearer ${TOKEN}"),
            ("MESSAGE", "Token limit"),
            ("PWD", "/home/me"),
            ("BYPASS", "1"),
            ("SERVER_URL", "https://user@example.com/x"),
        ] {
            assert_eq!(env_secret(name, value), None, "{name}={value}");
        }
    }

    fn check_args(args: &[&str], expect: &[(usize, &str, &str)]) {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let got: Vec<(usize, String, String)> = find_arg_secrets(&args)
            .into_iter()
            .map(|f| (f.arg_index, args[f.arg_index][f.range].to_owned(), f.name))
            .collect();
        let expect: Vec<(usize, String, String)> = expect
            .iter()
            .map(|(i, v, n)| (*i, v.to_string(), n.to_string()))
            .collect();
        assert_eq!(got, expect, "find_arg_secrets({args:?})");
    }

    #[test]
    fn arg_secrets() {
        check_args(
            &["server", "--api-key", "abc123"],
            &[(2, "abc123", "API_KEY")],
        );
        check_args(&["server", "--token=abc123"], &[(1, "abc123", "TOKEN")]);
        check_args(&["--api-key", "${KEY}"], &[]);
        check_args(&["--api-key", "--verbose"], &[]);
        check_args(
            &[
                "-y",
                "mcp-postgres",
                "postgresql://me:s3cret@db.local:5432/app",
            ],
            &[(2, "s3cret", "POSTGRESQL_PASSWORD")],
        );
        check_args(&["postgresql://me@db.local/app"], &[]);
        check_args(
            &["run", "-e", "GITHUB_TOKEN=ghp_x", "image"],
            &[(2, "ghp_x", "GITHUB_TOKEN")],
        );
        check_args(&["run", "-e", "GITHUB_TOKEN", "image"], &[]);
        check_args(
            &[
                "ghp_0123456789abcdefghijABCDEF",
                "sk-abcdefghijklmnopqrstuvwx",
            ],
            &[
                (0, "ghp_0123456789abcdefghijABCDEF", "ARG0_SECRET"),
                (1, "sk-abcdefghijklmnopqrstuvwx", "ARG1_SECRET"),
            ],
        );
        check_args(
            &["--token", "a", "--token", "b"],
            &[(1, "a", "TOKEN"), (3, "b", "TOKEN_2")],
        );
        check_args(
            &["-y", "@modelcontextprotocol/server-filesystem", "/home/me"],
            &[],
        );
        // A flag that would name a reserved variable gets a neutral name.
        check_args(
            &["--ld-token", "tok_0123", "--python-secret=x1"],
            &[(1, "tok_0123", "ARG1_SECRET"), (2, "x1", "ARG2_SECRET")],
        );
        // HTTP headers given as arguments: only the credentials move.
        check_args(
            &[
                "mcp-remote",
                "https://mcp.example/sse",
                "--header",
                "Authorization: Bearer sk_live_0123456789abcdef",
                "--header=X-Api-Key:k3y-v4lue",
                "-H",
                "Accept: text/event-stream",
                "--header",
                "Authorization:${AUTH_HEADER}",
            ],
            &[
                (3, "sk_live_0123456789abcdef", "AUTHORIZATION"),
                (4, "k3y-v4lue", "X_API_KEY"),
            ],
        );
        // Secret-named query parameters and a token in a URL's user place.
        check_args(
            &[
                "https://mcp.example/sse?api_key=abc123&region=eu&token=t0k#frag",
                "https://ghp_0123456789abcdefghijABCDEF0123456789@github.com/o/r.git",
                "https://me@example.com/?page=2",
                "postgres://me:pw@db/app?password=x",
            ],
            &[
                (0, "abc123", "API_KEY"),
                (0, "t0k", "TOKEN"),
                (
                    1,
                    "ghp_0123456789abcdefghijABCDEF0123456789",
                    "HTTPS_PASSWORD",
                ),
                (3, "pw", "POSTGRES_PASSWORD"),
                (3, "x", "PASSWORD"),
            ],
        );
        // A secret-shaped value after any `NAME=` or `--flag=`.
        check_args(
            &[
                "FOO=ghp_0123456789abcdefghijABCDEF",
                "--pager=sk-abcdefghijklmnopqrstuvwx",
                "--mode=fast",
                "--out=/tmp/x",
            ],
            &[
                (0, "ghp_0123456789abcdefghijABCDEF", "ARG0_SECRET"),
                (1, "sk-abcdefghijklmnopqrstuvwx", "ARG1_SECRET"),
            ],
        );
    }
}
