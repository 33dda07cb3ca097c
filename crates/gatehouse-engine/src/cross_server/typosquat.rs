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
/// `name==1.0` → `name`, `name[extra]` → `name`), lower-cased.
pub fn package_name(spec: &str) -> String {
    let spec = spec.trim();
    let (scope, rest) = match spec.strip_prefix('@') {
        Some(rest) => ("@", rest),
        None => ("", spec),
    };
    let end = rest
        .find(['@', '=', '<', '>', '~', '!', '[', ' '])
        .unwrap_or(rest.len());
    format!("{scope}{}", &rest[..end]).to_lowercase()
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
/// name. A package on the popular list or in `extra_known` (the policy's
/// vouched-for packages) is that package; equal configured names are the
/// same package, not a squat.
pub fn similar_package(
    spec: &str,
    configured: &[String],
    extra_known: &[String],
    threshold: f64,
) -> Option<(String, f64)> {
    let name = package_name(spec);
    let known: Vec<String> = POPULAR_PACKAGES
        .iter()
        .map(|p| p.to_string())
        .chain(configured.iter().map(|s| package_name(s)))
        .chain(extra_known.iter().map(|s| package_name(s)))
        .collect();
    let vouched = POPULAR_PACKAGES.iter().any(|p| *p == name)
        || extra_known.iter().any(|k| package_name(k) == name);
    if vouched {
        return None;
    }
    most_similar(&name, known.iter().map(String::as_str), threshold)
}
