//! A parsed config file (JSON/JSONC by span edits, TOML by `toml_edit`):
//! reading server entries and applying protect, unwrap and repair edits
//! while leaving everything Gatehouse does not own untouched.

use std::ops::Range;

use toml_edit::{Array, DocumentMut, ImDocument, Item, TableLike, Value};

use crate::entry::{parse_wrap, EntryKind, EntryPlan, EntryView};
use crate::jsonc::{self, apply_edits, line_indent, quote, Edit, Node};
use crate::table::Format;

/// A config that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseFailure {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What the parser expected.
    pub msg: String,
}

/// A span of the original text that held a secret: the backup stores the
/// `template` (placeholders, no value) instead of the text in `span`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// Byte range in the original text, quotes included.
    pub span: Range<usize>,
    /// The original string with each secret replaced by `{{vault:NAME}}`.
    pub template: String,
    /// How to quote the expanded value when splicing back: `json`, `toml-basic`, `toml-literal`.
    pub quote: String,
    /// Server id whose vault holds the secrets.
    pub owner: String,
}

/// How to undo one entry's wrapping in place.
#[derive(Debug, Clone)]
pub struct UnwrapPlan {
    /// The original command.
    pub command: String,
    /// Args after the original command that must be rewritten (index into
    /// the wrapped args, expanded value).
    pub args: Vec<(usize, String)>,
    /// Env values to put back (name, value).
    pub env: Vec<(String, String)>,
    /// Codex `env_vars` names Gatehouse added.
    pub remove_env_vars: Vec<String>,
}

/// The result of a protect rewrite.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// New file text.
    pub text: String,
    /// Secret spans of the original text.
    pub splices: Vec<Splice>,
    /// Per entry name, Codex `env_vars` names that were added.
    pub added_env_vars: Vec<(String, Vec<String>)>,
}

/// A parsed config.
pub enum ConfigDoc {
    /// JSON or JSONC, with the original text.
    Json { text: String, root: Node },
    /// TOML, with the original text.
    Toml {
        text: String,
        doc: ImDocument<String>,
    },
}

/// Env names `gatehouse wrap` needs that Codex would strip (it passes only
/// a fixed whitelist plus `env_vars`): on Linux the session bus that reaches
/// the Secret Service. macOS Keychain and Windows Credential Manager need
/// none (`--home` is on argv).
#[cfg(target_os = "linux")]
pub const CODEX_ENV_VARS: &[&str] = &["DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"];
/// See the Linux variant.
#[cfg(not(target_os = "linux"))]
pub const CODEX_ENV_VARS: &[&str] = &[];

impl ConfigDoc {
    /// Parses `text` as `format`.
    pub fn parse(format: Format, text: &str) -> Result<ConfigDoc, ParseFailure> {
        match format {
            Format::Json | Format::Jsonc => {
                if text.trim().is_empty() {
                    return Ok(ConfigDoc::Json {
                        text: text.to_owned(),
                        root: Node::Object {
                            span: 0..0,
                            members: vec![],
                        },
                    });
                }
                jsonc::parse(text)
                    .map(|root| ConfigDoc::Json {
                        text: text.to_owned(),
                        root,
                    })
                    .map_err(|e| ParseFailure {
                        line: e.line,
                        col: e.col,
                        msg: e.msg,
                    })
            }
            Format::Toml => ImDocument::parse(text.to_owned())
                .map(|doc| ConfigDoc::Toml {
                    text: text.to_owned(),
                    doc,
                })
                .map_err(|e| {
                    let (line, col) = e.span().map_or((1, 1), |s| jsonc::line_col(text, s.start));
                    ParseFailure {
                        line,
                        col,
                        msg: e.message().to_owned(),
                    }
                }),
        }
    }

    /// Refuses duplicate keys where Gatehouse edits: along the path to each
    /// server map, among its entry names, and anywhere inside an entry. JSON
    /// readers keep the last of two equal keys, so edits planned for one
    /// would land in the other. (TOML forbids duplicates; its parser
    /// already refuses them.)
    pub fn check_unique_keys(
        &self,
        servers_key: &str,
        per_project: bool,
    ) -> Result<(), ParseFailure> {
        let ConfigDoc::Json { text, root } = self else {
            return Ok(());
        };
        let dup = |(first, again): (&jsonc::Member, &jsonc::Member), place: &str| {
            let (line, col) = jsonc::line_col(text, again.key_span.start);
            let (l1, c1) = jsonc::line_col(text, first.key_span.start);
            ParseFailure {
                line,
                col,
                msg: format!(
                    "duplicate key {} in {place} (also at {l1}:{c1}); Gatehouse cannot tell which one the client uses",
                    quote(&again.key)
                ),
            }
        };
        let followed = |k: &str| k == servers_key || (per_project && k == "projects");
        if let Some(d) = duplicate_where(root, followed) {
            return Err(dup(d, "the top level"));
        }
        let mut maps = vec![(servers_key.to_owned(), root.get(servers_key))];
        if per_project {
            let projects = root.get("projects");
            if let Some(d) = projects.and_then(duplicate_member) {
                return Err(dup(d, "projects"));
            }
            for m in projects.map(Node::members).unwrap_or_default() {
                if let Some(d) = duplicate_where(&m.value, |k| k == servers_key) {
                    return Err(dup(d, &format!("projects.{}", quote(&m.key))));
                }
                maps.push((
                    format!("projects.{}.{servers_key}", quote(&m.key)),
                    m.value.get(servers_key),
                ));
            }
        }
        for (place, map) in maps {
            let Some(map) = map else { continue };
            if let Some(d) = duplicate_member(map) {
                return Err(dup(d, &place));
            }
            for entry in map.members() {
                if let Some(d) = first_duplicate_deep(&entry.value) {
                    return Err(dup(d, &format!("entry {}", quote(&entry.key))));
                }
            }
        }
        Ok(())
    }

    /// Every server entry, in file order. `per_project` adds Claude Code's
    /// `projects[*].<servers_key>` sections.
    pub fn entries(&self, servers_key: &str, per_project: bool) -> Vec<EntryView> {
        let mut containers = vec![vec![servers_key.to_owned()]];
        match self {
            ConfigDoc::Json { root, .. } => {
                if per_project {
                    for m in root.get("projects").map(Node::members).unwrap_or_default() {
                        if m.value.get(servers_key).is_some() {
                            containers.push(vec![
                                "projects".into(),
                                m.key.clone(),
                                servers_key.to_owned(),
                            ]);
                        }
                    }
                }
                let mut out = Vec::new();
                for c in containers {
                    let Some(map) = json_path(root, &c) else {
                        continue;
                    };
                    for m in map.members() {
                        out.push(json_entry(&c, &m.key, &m.value));
                    }
                }
                out
            }
            ConfigDoc::Toml { doc, .. } => {
                let Some(map) = doc
                    .as_table()
                    .get(servers_key)
                    .and_then(Item::as_table_like)
                else {
                    return vec![];
                };
                map.iter()
                    .filter_map(|(k, v)| {
                        v.as_table_like().map(|t| toml_entry(&containers[0], k, t))
                    })
                    .collect()
            }
        }
    }

    /// Applies protect plans (entries matched by container and name).
    pub fn protect(&self, plans: &[(&EntryView, &EntryPlan)], exe: &str) -> Rewrite {
        match self {
            ConfigDoc::Json { text, root } => json_protect(text, root, plans, exe),
            ConfigDoc::Toml { text, doc } => toml_protect(text, doc, plans, exe),
        }
    }

    /// Unwraps entries in place.
    pub fn unwrap(&self, targets: &[(&EntryView, UnwrapPlan)]) -> String {
        match self {
            ConfigDoc::Json { text, root } => json_unwrap(text, root, targets),
            ConfigDoc::Toml { text, doc } => toml_unwrap(text, doc, targets),
        }
    }

    /// Points wrapped entries at `exe`. Returns the new text.
    pub fn repair(&self, entries: &[&EntryView], exe: &str) -> String {
        match self {
            ConfigDoc::Json { text, root } => {
                let edits: Vec<Edit> = entries
                    .iter()
                    .filter_map(|e| {
                        json_entry_node(root, e)?.get("command").map(|n| Edit {
                            range: n.span(),
                            text: quote(exe),
                        })
                    })
                    .collect();
                apply_edits(text, &edits)
            }
            ConfigDoc::Toml { doc, .. } => {
                let mut doc = doc.clone().into_mut();
                for e in entries {
                    if let Some(t) = toml_entry_mut(&mut doc, e) {
                        set_keep_decor(t, "command", Value::from(exe));
                    }
                }
                doc.to_string()
            }
        }
    }
}

type Duplicate<'a> = (&'a jsonc::Member, &'a jsonc::Member);

/// The first member of `node` (an object) whose key repeats an earlier one
/// and passes `wanted`.
fn duplicate_where(node: &Node, wanted: impl Fn(&str) -> bool) -> Option<Duplicate<'_>> {
    let members = node.members();
    members.iter().enumerate().find_map(|(i, again)| {
        members[..i]
            .iter()
            .find(|first| first.key == again.key && wanted(&again.key))
            .map(|first| (first, again))
    })
}

fn duplicate_member(node: &Node) -> Option<Duplicate<'_>> {
    duplicate_where(node, |_| true)
}

/// Like [`duplicate_member`], in `node` and every object inside it.
fn first_duplicate_deep(node: &Node) -> Option<Duplicate<'_>> {
    match node {
        Node::Object { members, .. } => duplicate_member(node)
            .or_else(|| members.iter().find_map(|m| first_duplicate_deep(&m.value))),
        Node::Array { items, .. } => items.iter().find_map(first_duplicate_deep),
        _ => None,
    }
}

fn json_path<'a>(root: &'a Node, path: &[String]) -> Option<&'a Node> {
    path.iter().try_fold(root, |n, k| n.get(k))
}

fn json_entry_node<'a>(root: &'a Node, e: &EntryView) -> Option<&'a Node> {
    json_path(root, &e.container)?.get(&e.name)
}

/// Why an entry with a `command` has a `command`, `args` or `env` that is
/// not what clients accept, if it does.
fn json_malformed(node: &Node) -> Option<String> {
    if node.get("command").is_some_and(|c| c.as_str().is_none()) {
        return Some("\"command\" is not a string".into());
    }
    match node.get("args") {
        None => {}
        Some(Node::Array { items, .. }) if all_strings(items) => {}
        Some(_) => return Some("\"args\" is not an array of strings".into()),
    }
    match node.get("env") {
        None => {}
        Some(Node::Object { members, .. }) if all_strings(members.iter().map(|m| &m.value)) => {}
        Some(_) => return Some("\"env\" is not an object of strings".into()),
    }
    None
}

fn all_strings<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> bool {
    nodes.into_iter().all(|n| n.as_str().is_some())
}

/// The TOML counterpart of [`json_malformed`].
fn toml_malformed(t: &dyn TableLike) -> Option<String> {
    if t.get("command")?.as_str().is_none() {
        return Some("`command` is not a string".into());
    }
    match t.get("args").map(Item::as_array) {
        None => {}
        Some(Some(a)) if a.iter().all(|v| v.as_str().is_some()) => {}
        Some(_) => return Some("`args` is not an array of strings".into()),
    }
    match t.get("env").map(Item::as_table_like) {
        None => {}
        Some(Some(e)) if e.iter().all(|(_, v)| v.as_str().is_some()) => {}
        Some(_) => return Some("`env` is not a table of strings".into()),
    }
    None
}

fn json_entry(container: &[String], name: &str, node: &Node) -> EntryView {
    let url = ["url", "serverUrl", "httpUrl"]
        .iter()
        .find_map(|k| node.get(k).and_then(Node::as_str));
    let kind = if let Some(command) = node.get("command").and_then(Node::as_str) {
        let args = node
            .get("args")
            .map(|a| {
                a.items()
                    .iter()
                    .map(|i| i.as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        EntryKind::Stdio {
            command: command.to_owned(),
            args,
        }
    } else if let Some(url) = url {
        EntryKind::Remote {
            url: url.to_owned(),
        }
    } else if node.get("settings").is_some() {
        EntryKind::Extension
    } else {
        EntryKind::Unknown
    };
    // Zed's older `command: {path, args, env}` is not rewritten (it is
    // malformed for Gatehouse), but its plain-text secrets are reported and
    // kept out of diffs like any entry's.
    let nested = node.get("command").filter(|c| c.as_str().is_none());
    let env = node
        .get("env")
        .or_else(|| nested.and_then(|c| c.get("env")))
        .map(|e| {
            e.members()
                .iter()
                .map(|m| (m.key.clone(), m.value.as_str().map(str::to_owned)))
                .collect()
        })
        .unwrap_or_default();
    let nested_args = nested
        .and_then(|c| c.get("args"))
        .map(|a| {
            a.items()
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let wrapped = match &kind {
        EntryKind::Stdio { command, args } => parse_wrap(command, args),
        _ => None,
    };
    EntryView {
        container: container.to_vec(),
        name: name.to_owned(),
        kind,
        env,
        env_file: node.get("envFile").is_some(),
        remote_dev: matches!(node.get("remote"), Some(Node::Bool { value: true, .. })),
        malformed: json_malformed(node),
        headers: node
            .get("headers")
            .map(|h| {
                h.members()
                    .iter()
                    .map(|m| (m.key.clone(), m.value.as_str().map(str::to_owned)))
                    .collect()
            })
            .unwrap_or_default(),
        wrapped,
        pass_through: vec![],
        nested_args,
    }
}

/// Renders already-quoted `items` for insertion before an existing first
/// array item, matching the array's one-line or one-item-per-line layout.
fn json_items_before(text: &str, first: &Node, items: &[String]) -> String {
    let sep = match line_indent(text, first.span().start) {
        Some(indent) => format!(",{}{indent}", line_ending(text)),
        None => ", ".to_owned(),
    };
    let mut out = items.join(&sep);
    out.push_str(&sep);
    out
}

/// The file's own line break: a CRLF file gets CRLF lines.
fn line_ending(text: &str) -> &'static str {
    if text.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

fn json_array(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

/// The wrap prefix as JSON literals; the original command (its last item)
/// keeps its literal exactly as written (escapes and all), so unwrapping
/// can put those bytes back.
fn json_prefix(text: &str, prefix: &[String], command: &Node) -> Vec<String> {
    let mut items: Vec<String> = prefix.iter().map(|s| quote(s)).collect();
    if let Some(last) = items.last_mut() {
        *last = text[command.span()].to_owned();
    }
    items
}

fn json_protect(text: &str, root: &Node, plans: &[(&EntryView, &EntryPlan)], exe: &str) -> Rewrite {
    let mut edits = Vec::new();
    let mut splices = Vec::new();
    for (view, plan) in plans {
        let Some(node) = json_entry_node(root, view) else {
            continue;
        };
        let Some(cmd) = node.get("command") else {
            continue;
        };
        edits.push(Edit {
            range: cmd.span(),
            text: quote(exe),
        });
        let prefix = json_prefix(text, &plan.prefix, cmd);
        match node.get("args") {
            Some(args @ Node::Array { items, .. }) => {
                if let Some(first) = items.first() {
                    edits.push(Edit {
                        range: first.span().start..first.span().start,
                        text: json_items_before(text, first, &prefix),
                    });
                } else {
                    edits.push(Edit {
                        range: args.span(),
                        text: json_array(&prefix),
                    });
                }
                for (i, new) in &plan.arg_rewrites {
                    if let Some(item) = items.get(*i) {
                        edits.push(Edit {
                            range: item.span(),
                            text: quote(new),
                        });
                        splices.push(Splice {
                            span: item.span(),
                            template: new.clone(),
                            quote: "json".into(),
                            owner: plan.id.clone(),
                        });
                    }
                }
            }
            _ => {
                let member = node
                    .member("command")
                    .map(|m| m.key_span.start)
                    .unwrap_or(cmd.span().start);
                let sep = match line_indent(text, member) {
                    Some(indent) => format!(",{}{indent}", line_ending(text)),
                    None => ", ".into(),
                };
                edits.push(Edit {
                    range: cmd.span().end..cmd.span().end,
                    text: format!("{sep}\"args\": {}", json_array(&prefix)),
                });
            }
        }
        for (name, _) in &plan.env_moves {
            if let Some(v) = node.get("env").and_then(|e| e.get(name)) {
                let template = gatehouse_vault::placeholder(name);
                edits.push(Edit {
                    range: v.span(),
                    text: quote(&template),
                });
                splices.push(Splice {
                    span: v.span(),
                    template,
                    quote: "json".into(),
                    owner: plan.id.clone(),
                });
            }
        }
    }
    splices.sort_by_key(|s| s.span.start);
    Rewrite {
        text: apply_edits(text, &edits),
        splices,
        added_env_vars: vec![],
    }
}

fn json_unwrap(text: &str, root: &Node, targets: &[(&EntryView, UnwrapPlan)]) -> String {
    let mut edits = Vec::new();
    for (view, plan) in targets {
        let Some(node) = json_entry_node(root, view) else {
            continue;
        };
        // An entry unwrapped by hand only gets its placeholders expanded.
        let first_original = view.wrapped.as_ref().map_or(0, |w| w.inner + 1);
        let items = node.get("args").map(Node::items).unwrap_or_default();
        if let Some(wrap) = &view.wrapped {
            // The original command's literal as protect copied it.
            let command = items
                .get(wrap.inner)
                .filter(|n| n.as_str() == Some(plan.command.as_str()))
                .map_or_else(|| quote(&plan.command), |n| text[n.span()].to_owned());
            if let Some(cmd) = node.get("command") {
                edits.push(Edit {
                    range: cmd.span(),
                    text: command,
                });
            }
            if let Some(args @ Node::Array { .. }) = node.get("args") {
                match (items.first(), items.get(first_original)) {
                    (Some(first), Some(keep)) => edits.push(Edit {
                        range: first.span().start..keep.span().start,
                        text: String::new(),
                    }),
                    _ => edits.push(Edit {
                        range: args.span(),
                        text: "[]".into(),
                    }),
                }
            }
        }
        for (i, value) in &plan.args {
            if let Some(item) = items.get(*i).filter(|_| *i >= first_original) {
                edits.push(Edit {
                    range: item.span(),
                    text: quote(value),
                });
            }
        }
        for (name, value) in &plan.env {
            if let Some(v) = node.get("env").and_then(|e| e.get(name)) {
                edits.push(Edit {
                    range: v.span(),
                    text: quote(value),
                });
            }
        }
    }
    apply_edits(text, &edits)
}

fn toml_entry(container: &[String], name: &str, t: &dyn TableLike) -> EntryView {
    let str_of = |k: &str| t.get(k).and_then(Item::as_str).map(str::to_owned);
    let kind = if let Some(command) = str_of("command") {
        let args = t
            .get("args")
            .and_then(Item::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        EntryKind::Stdio { command, args }
    } else if let Some(url) = str_of("url") {
        EntryKind::Remote { url }
    } else {
        EntryKind::Unknown
    };
    let env = t
        .get("env")
        .and_then(Item::as_table_like)
        .map(|e| {
            e.iter()
                .map(|(k, v)| (k.to_owned(), v.as_str().map(str::to_owned)))
                .collect()
        })
        .unwrap_or_default();
    let wrapped = match &kind {
        EntryKind::Stdio { command, args } => parse_wrap(command, args),
        _ => None,
    };
    EntryView {
        container: container.to_vec(),
        name: name.to_owned(),
        kind,
        env,
        env_file: false,
        remote_dev: false,
        malformed: toml_malformed(t),
        headers: t
            .get("http_headers")
            .and_then(Item::as_table_like)
            .map(|h| {
                h.iter()
                    .map(|(k, v)| (k.to_owned(), v.as_str().map(str::to_owned)))
                    .collect()
            })
            .unwrap_or_default(),
        wrapped,
        pass_through: t
            .get("env_vars")
            .and_then(Item::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        nested_args: vec![],
    }
}

fn toml_entry_mut<'a>(doc: &'a mut DocumentMut, e: &EntryView) -> Option<&'a mut dyn TableLike> {
    doc.as_table_mut()
        .get_mut(&e.container[0])?
        .as_table_like_mut()?
        .get_mut(&e.name)?
        .as_table_like_mut()
}

/// Replaces a value keeping the old value's surrounding whitespace and comments.
fn set_keep_decor(t: &mut dyn TableLike, key: &str, mut value: Value) {
    if let Some(old) = t.get(key).and_then(Item::as_value) {
        *value.decor_mut() = old.decor().clone();
    }
    match t.get_mut(key) {
        Some(item) => *item = Item::Value(value),
        None => {
            t.insert(key, Item::Value(value));
        }
    }
}

/// How a TOML string was written: basic (`"…"`), literal (`'…'`), or one
/// of their multi-line forms, with or without the line break the opening
/// quotes may be followed by (which is not part of the value).
fn toml_quote_style(text: &str, span: &Range<usize>) -> &'static str {
    let written = &text[span.clone()];
    let breaks_after = |quotes: &str| {
        let rest = &written[quotes.len()..];
        rest.starts_with('\n') || rest.starts_with("\r\n")
    };
    match () {
        _ if written.starts_with("'''") && breaks_after("'''") => "toml-ml-literal-nl",
        _ if written.starts_with("'''") => "toml-ml-literal",
        _ if written.starts_with("\"\"\"") && breaks_after("\"\"\"") => "toml-ml-basic-nl",
        _ if written.starts_with("\"\"\"") => "toml-ml-basic",
        _ if written.starts_with('\'') => "toml-literal",
        _ => "toml-basic",
    }
}

fn toml_protect(
    text: &str,
    im: &ImDocument<String>,
    plans: &[(&EntryView, &EntryPlan)],
    exe: &str,
) -> Rewrite {
    let mut splices = Vec::new();
    let mut added = Vec::new();
    // Spans come from the immutable parse of the original text.
    for (view, plan) in plans {
        let Some(t) = im
            .as_table()
            .get(&view.container[0])
            .and_then(Item::as_table_like)
            .and_then(|m| m.get(&view.name))
            .and_then(Item::as_table_like)
        else {
            continue;
        };
        if let Some(arr) = t.get("args").and_then(Item::as_array) {
            for (i, new) in &plan.arg_rewrites {
                if let Some(span) = arr.get(*i).and_then(Value::span) {
                    splices.push(Splice {
                        quote: toml_quote_style(text, &span).into(),
                        span,
                        template: new.clone(),
                        owner: plan.id.clone(),
                    });
                }
            }
        }
        if let Some(env) = t.get("env").and_then(Item::as_table_like) {
            for (name, _) in &plan.env_moves {
                if let Some(span) = env.get(name).and_then(Item::as_value).and_then(Value::span) {
                    splices.push(Splice {
                        quote: toml_quote_style(text, &span).into(),
                        span,
                        template: gatehouse_vault::placeholder(name),
                        owner: plan.id.clone(),
                    });
                }
            }
        }
    }
    let mut doc = im.clone().into_mut();
    for (view, plan) in plans {
        let Some(t) = toml_entry_mut(&mut doc, view) else {
            continue;
        };
        // The original command keeps its literal as written (see json_prefix).
        let mut prefix: Array = plan.prefix.iter().map(String::as_str).collect();
        if let Some(command) = t.get("command").and_then(Item::as_value) {
            let mut command = command.clone();
            command.decor_mut().clear();
            prefix.replace_formatted(prefix.len() - 1, command);
        }
        set_keep_decor(t, "command", Value::from(exe));
        match t.get_mut("args").and_then(Item::as_array_mut) {
            Some(arr) => {
                for (i, new) in &plan.arg_rewrites {
                    if let Some(v) = arr.get_mut(*i) {
                        let decor = v.decor().clone();
                        *v = Value::from(new.as_str());
                        *v.decor_mut() = decor;
                    }
                }
                insert_items_before(arr, prefix);
            }
            None => {
                prefix.fmt();
                t.insert("args", Item::Value(Value::Array(prefix)));
            }
        }
        if let Some(env) = t.get_mut("env").and_then(Item::as_table_like_mut) {
            for (name, _) in &plan.env_moves {
                set_keep_decor(env, name, Value::from(gatehouse_vault::placeholder(name)));
            }
        }
        let mut names_added = Vec::new();
        let existing: Vec<String> = t
            .get("env_vars")
            .and_then(Item::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        for name in CODEX_ENV_VARS {
            if !existing.iter().any(|e| e == name) {
                names_added.push((*name).to_owned());
            }
        }
        if !names_added.is_empty() {
            match t.get_mut("env_vars").and_then(Item::as_array_mut) {
                Some(arr) => names_added.iter().for_each(|n| arr.push(n.as_str())),
                None => {
                    let arr: Array = names_added.iter().map(String::as_str).collect();
                    t.insert("env_vars", Item::Value(Value::Array(arr)));
                }
            }
        }
        added.push((view.name.clone(), names_added));
    }
    splices.sort_by_key(|s| s.span.start);
    Rewrite {
        text: keep_layout(text, doc.to_string()),
        splices,
        added_env_vars: added,
    }
}

fn toml_unwrap(
    text: &str,
    im: &ImDocument<String>,
    targets: &[(&EntryView, UnwrapPlan)],
) -> String {
    let mut doc = im.clone().into_mut();
    for (view, plan) in targets {
        let Some(t) = toml_entry_mut(&mut doc, view) else {
            continue;
        };
        // An entry unwrapped by hand only gets its placeholders expanded.
        if let Some(wrap) = &view.wrapped {
            // The original command's literal as protect copied it.
            let command = t
                .get("args")
                .and_then(Item::as_array)
                .and_then(|a| a.get(wrap.inner))
                .filter(|v| v.as_str() == Some(plan.command.as_str()))
                .cloned()
                .unwrap_or_else(|| Value::from(plan.command.as_str()));
            set_keep_decor(t, "command", command);
        }
        if let Some(arr) = t.get_mut("args").and_then(Item::as_array_mut) {
            for (i, value) in &plan.args {
                if let Some(v) = arr.get_mut(*i) {
                    let decor = v.decor().clone();
                    *v = Value::from(value.as_str());
                    *v.decor_mut() = decor;
                }
            }
            if let Some(wrap) = &view.wrapped {
                let lead = arr.get(0).map(|v| decor_prefix(v).to_owned());
                for _ in 0..=wrap.inner.min(arr.len().saturating_sub(1)) {
                    arr.remove(0);
                }
                // On one line, the new first item loses its space; one per
                // line, it keeps its own line (and comment).
                if let (Some(lead), Some(first)) = (lead, arr.get_mut(0)) {
                    if !decor_prefix(first).contains('\n') {
                        first.decor_mut().set_prefix(lead);
                    }
                }
            }
        }
        if let Some(env) = t.get_mut("env").and_then(Item::as_table_like_mut) {
            for (name, value) in &plan.env {
                set_keep_decor(env, name, Value::from(value.as_str()));
            }
        }
        let mut drop_env_vars = false;
        if let Some(arr) = t.get_mut("env_vars").and_then(Item::as_array_mut) {
            arr.retain(|v| {
                !v.as_str()
                    .is_some_and(|s| plan.remove_env_vars.iter().any(|r| r == s))
            });
            drop_env_vars = arr.is_empty() && !plan.remove_env_vars.is_empty();
        }
        if drop_env_vars {
            t.remove("env_vars");
        }
    }
    keep_layout(text, doc.to_string())
}

fn decor_prefix(v: &Value) -> &str {
    v.decor().prefix().and_then(|p| p.as_str()).unwrap_or("")
}

/// Puts `items` before an array's own, in its layout (one line, or one item
/// per line at its indent), leaving its items' comments where they are.
fn insert_items_before(arr: &mut Array, items: Array) {
    let first = arr.get(0).map(|v| decor_prefix(v).to_owned());
    let one_per_line = first
        .as_deref()
        .and_then(|p| p.rfind('\n').map(|at| p[at..].to_owned()));
    let (lead, sep) = match (&one_per_line, &first) {
        (Some(indent), _) => (indent.clone(), indent.clone()),
        (None, Some(p)) => (p.clone(), " ".to_owned()),
        (None, None) => (String::new(), " ".to_owned()),
    };
    let count = items.len();
    for (k, mut item) in items.into_iter().enumerate() {
        item.decor_mut()
            .set_prefix(if k == 0 { &lead } else { &sep }.clone());
        item.decor_mut().set_suffix("");
        arr.insert_formatted(k, item);
    }
    if one_per_line.is_none() {
        if let Some(old_first) = arr.get_mut(count) {
            old_first.decor_mut().set_prefix(" ");
        }
    }
}

/// What `toml_edit` writes, with the file's byte-order mark and CRLF lines
/// kept.
fn keep_layout(original: &str, mut out: String) -> String {
    if line_ending(original) == "\r\n" {
        out = out.replace("\r\n", "\n").replace('\n', "\r\n");
    }
    if original.starts_with('\u{feff}') && !out.starts_with('\u{feff}') {
        out.insert(0, '\u{feff}');
    }
    out
}

/// Quotes an expanded value the way the original span was quoted. A value
/// the original form cannot hold as it is (its closing quotes, a backslash,
/// a control character) is written as a basic string; the restore is then
/// not byte for byte, and unprotect says so.
pub fn requote(style: &str, value: &str) -> String {
    let holds = |closing: &str| {
        !value.contains(closing)
            && !value.contains('\\')
            && !value
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    };
    let line_break = if style.ends_with("-nl") { "\n" } else { "" };
    match style {
        "toml-literal" if !value.contains('\'') && !value.contains('\n') => format!("'{value}'"),
        "toml-ml-literal" | "toml-ml-literal-nl" if holds("'''") => {
            format!("'''{line_break}{value}'''")
        }
        "toml-ml-basic" | "toml-ml-basic-nl" if holds("\"") => {
            format!("\"\"\"{line_break}{value}\"\"\"")
        }
        s if s.starts_with("toml-") => Value::from(value).to_string().trim().to_owned(),
        _ => quote(value),
    }
}
