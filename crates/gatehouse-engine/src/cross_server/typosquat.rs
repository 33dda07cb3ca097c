//! Typosquatting: a server id or a launched package that is nearly, but not
//! exactly, a known one (normalized Levenshtein, `strsim`).

/// Popular MCP server packages (npm and PyPI), compared without versions.
pub const POPULAR_PACKAGES: &[&str] = &[
    "@modelcontextprotocol/server-filesystem",
    "@modelcontextprotocol/server-memory",
    "@modelcontextprotocol/server-everything",
    "@modelcontextprotocol/server-github",
    "@modelcontextprotocol/server-gitlab",
    "@modelcontextprotocol/server-slack",
    "@modelcontextprotocol/server-postgres",
    "@modelcontextprotocol/server-sqlite",
    "@modelcontextprotocol/server-puppeteer",
    "@modelcontextprotocol/server-brave-search",
    "@modelcontextprotocol/server-google-maps",
    "@modelcontextprotocol/server-gdrive",
    "@modelcontextprotocol/server-sequential-thinking",
    "@modelcontextprotocol/server-redis",
    "@modelcontextprotocol/server-sentry",
    "@modelcontextprotocol/server-aws-kb-retrieval",
    "@modelcontextprotocol/server-everart",
    "@modelcontextprotocol/inspector",
    "@playwright/mcp",
    "@upstash/context7-mcp",
    "@notionhq/notion-mcp-server",
    "@stripe/mcp",
    "@supabase/mcp-server-supabase",
    "@cloudflare/mcp-server-cloudflare",
    "@browserbasehq/mcp-server-browserbase",
    "@heroku/mcp-server",
    "@sentry/mcp-server",
    "@azure/mcp",
    "@executeautomation/playwright-mcp-server",
    "@wonderwhy-er/desktop-commander",
    "@21st-dev/magic",
    "firecrawl-mcp",
    "tavily-mcp",
    "exa-mcp-server",
    "figma-developer-mcp",
    "mcp-remote",
    "mcp-server-fetch",
    "mcp-server-git",
    "mcp-server-time",
    "mcp-server-sqlite",
    "mcp-server-qdrant",
    "mcp-server-kubernetes",
    "mcp-server-docker",
    "awslabs.aws-documentation-mcp-server",
    "awslabs.core-mcp-server",
    "mcp-atlassian",
    "mcp-obsidian",
    "markitdown-mcp",
    "serena",
];

/// A package spec without its version (`@scope/name@1.2` → `@scope/name`,
/// `name==1.0` → `name`, `name[extra]` → `name`), spelled as written (what
/// a person is shown: `@modelcontextprotocoI/…` keeps its capital I).
pub fn package_name(spec: &str) -> String {
    let spec = spec.trim();
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(rest) => ("@", rest),
        None => ("", spec),
    };
    let end = rest
        .find(['@', '=', '<', '>', '~', '!', '[', ' '])
        .unwrap_or(rest.len());
    format!("{scope}{}", &rest[..end])
}

/// The name packages are compared by: lower case, each run of `-`, `_` and
/// `.` one `-`. PyPI treats names so (PEP 503: `mcp_server_fetch` is
/// `mcp-server-fetch`); npm refuses a new name that equals an existing one
/// once punctuation is removed, so names equal here are one package there
/// too (or could not have been published).
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Normalized Levenshtein similarity in [0, 1].
pub fn similarity(a: &str, b: &str) -> f64 {
    strsim::normalized_levenshtein(a, b)
}

/// The most similar name of `known` at or above `threshold` that is not
/// equal to `name`, with its similarity.
pub fn most_similar<'a, I>(name: &str, known: I, threshold: f64) -> Option<(String, f64)>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(String, f64)> = None;
    for other in known {
        if other == name {
            continue;
        }
        let s = similarity(name, other);
        if s >= threshold && best.as_ref().is_none_or(|(_, b)| s > *b) {
            best = Some((other.to_string(), s));
        }
    }
    best
}

/// A launched package similar to a configured or popular one: the similar
/// name, as listed or configured. Names are compared [`normalize`]d: a
/// package on the popular list or in `extra_known` (the policy's
/// vouched-for packages) is that package; equal configured names are the
/// same package, not a squat.
pub fn similar_package(
    spec: &str,
    configured: &[String],
    extra_known: &[String],
    threshold: f64,
) -> Option<(String, f64)> {
    let name = normalize(&package_name(spec));
    let vouched = POPULAR_PACKAGES
        .iter()
        .map(|p| p.to_string())
        .chain(extra_known.iter().map(|k| package_name(k)))
        .any(|k| normalize(&k) == name);
    if vouched {
        return None;
    }
    let known = POPULAR_PACKAGES
        .iter()
        .map(|p| p.to_string())
        .chain(configured.iter().map(|s| package_name(s)))
        .chain(extra_known.iter().map(|s| package_name(s)));
    let mut best: Option<(String, f64)> = None;
    for other in known {
        let s = similarity(&name, &normalize(&other));
        if s < 1.0 && s >= threshold && best.as_ref().is_none_or(|(_, b)| s > *b) {
            best = Some((other, s));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::{normalize, package_name, similar_package};
    use crate::launch::launch_facts;

    /// What `gatehouse wrap` judges for `argv`: the similar known package.
    fn check(argv: &[&str], configured: &[&str], want: Option<&str>) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let configured: Vec<String> = configured.iter().map(|s| s.to_string()).collect();
        let got = launch_facts(&argv)
            .package
            .and_then(|p| similar_package(&p, &configured, &[], 0.85))
            .map(|(similar, _)| similar);
        assert_eq!(got.as_deref(), want, "{argv:?}");
    }

    #[test]
    fn the_installed_package_is_judged() {
        let fs = Some("@modelcontextprotocol/server-filesystem");
        let squat = "@modelcontextprotocol/server-filesytem";
        check(&["npx", "-y", squat], &[], fs);
        check(&["npx", "-p", squat, "mcp-server-filesystem"], &[], fs);
        check(
            &["npx", "--package", squat, "mcp-server-filesystem"],
            &[],
            fs,
        );
        check(&["npx", &format!("--package={squat}"), "x"], &[], fs);
        let fetch = Some("mcp-server-fetch");
        check(
            &["uvx", "--from", "mcp-server-fech", "mcp-server-fetch"],
            &[],
            fetch,
        );
        check(
            &["pipx", "run", "--spec", "mcp-server-fech", "x"],
            &[],
            fetch,
        );
        check(&["uvx", "mcp_server_fech"], &[], fetch);
    }

    #[test]
    fn names_are_compared_as_the_registries_do() {
        check(&["uvx", "mcp_server_fetch"], &[], None);
        check(&["uvx", "MCP.Server_Fetch==1.0"], &[], None);
        check(&["uvx", "mcp-server-fetch"], &[], None);
        check(&["uvx", "acme_tools"], &["acme-tools"], None);
        check(&["uvx", "acme_tool"], &["acme-tools"], Some("acme-tools"));
        assert_eq!(normalize("Mcp__Server.-fetch"), "mcp-server-fetch");
    }

    #[test]
    fn a_person_is_shown_the_name_as_written() {
        assert_eq!(
            package_name("@modelcontextprotocoI/server-filesystem@1.0"),
            "@modelcontextprotocoI/server-filesystem"
        );
        check(
            &["npx", "@modelcontextprotocoI/server-filesystem"],
            &[],
            Some("@modelcontextprotocol/server-filesystem"),
        );
    }
}
