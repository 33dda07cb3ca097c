//! Tool classification: `read`, `write`, `send`, `compute` or `unknown`, from
//! the name (split on `_ - .` and camelCase), else the description; policy
//! overrides only add risk to what the name says; declared annotations only raise risk.

use serde_json::Value;

/// What a tool does with data, as far as cross-server rules care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolClass {
    Read,
    Unknown,
    Write,
    Compute,
    Send,
}

impl ToolClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::Write => "write",
            ToolClass::Send => "send",
            ToolClass::Compute => "compute",
            ToolClass::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<ToolClass> {
        Some(match text {
            "read" => ToolClass::Read,
            "write" => ToolClass::Write,
            "send" => ToolClass::Send,
            "compute" => ToolClass::Compute,
            "unknown" => ToolClass::Unknown,
            _ => return None,
        })
    }

    /// Ordered by risk: `Send` > `Compute` > `Write` > `Unknown` > `Read`.
    fn raise(self, other: ToolClass) -> ToolClass {
        self.max(other)
    }
}

const READ: &[&str] = &[
    "read", "get", "query", "list", "fetch", "search", "find", "lookup",
];
const WRITE: &[&str] = &[
    "write", "update", "set", "create", "delete", "remove", "put", "insert",
];
const SEND: &[&str] = &[
    "send", "post", "upload", "http", "email", "notify", "publish", "push",
];
const COMPUTE: &[&str] = &["run", "exec", "eval", "execute", "invoke", "call"];
/// Verbs that only classify as the first word: `read_email` reads mail.
const FIRST_ONLY: &[&str] = &["http", "email"];

/// Lower-case words of a tool name: split on `_`, `-`, `.`, `/`, spaces and
/// camelCase boundaries (`sendEmail` → `send`, `email`; `HTTPGet` → `http`, `get`).
pub fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        let next = chars.get(i + 1);
        let boundary = c.is_uppercase()
            && !cur.is_empty()
            && (prev.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit())
                || (prev.is_some_and(char::is_uppercase)
                    && next.is_some_and(|n| n.is_lowercase())));
        if boundary {
            words.push(std::mem::take(&mut cur));
        }
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn verb_class(word: &str, first: bool) -> Option<ToolClass> {
    if !first && FIRST_ONLY.contains(&word) {
        return None;
    }
    if SEND.contains(&word) {
        Some(ToolClass::Send)
    } else if COMPUTE.contains(&word) {
        Some(ToolClass::Compute)
    } else if WRITE.contains(&word) {
        Some(ToolClass::Write)
    } else if READ.contains(&word) {
        Some(ToolClass::Read)
    } else {
        None
    }
}

/// The class the name says: its first word that is a known verb
/// (`gmail.send` → send; `get_post` → read).
pub fn class_from_name(name: &str) -> Option<ToolClass> {
    name_words(name)
        .iter()
        .enumerate()
        .find_map(|(i, w)| verb_class(w, i == 0))
}

/// Description keywords, with their inflections, by class.
const DESC: &[(ToolClass, &[&str])] = &[
    (
        ToolClass::Send,
        &[
            "send",
            "sends",
            "sending",
            "post",
            "posts",
            "upload",
            "uploads",
            "email",
            "emails",
            "publish",
            "publishes",
            "notify",
            "notifies",
            "transmit",
            "transmits",
            "webhook",
        ],
    ),
    (
        ToolClass::Compute,
        &[
            "execute",
            "executes",
            "run",
            "runs",
            "evaluate",
            "evaluates",
            "eval",
            "shell",
            "command",
        ],
    ),
    (
        ToolClass::Write,
        &[
            "write", "writes", "create", "creates", "update", "updates", "delete", "deletes",
            "modify", "modifies", "remove", "removes", "save", "saves", "insert", "inserts",
        ],
    ),
    (
        ToolClass::Read,
        &[
            "read",
            "reads",
            "get",
            "gets",
            "retrieve",
            "retrieves",
            "fetch",
            "fetches",
            "list",
            "lists",
            "search",
            "searches",
            "query",
            "queries",
            "find",
            "finds",
            "lookup",
            "look",
            "show",
            "shows",
            "return",
            "returns",
        ],
    ),
];

/// The riskiest class any description keyword names (descriptions are
/// fuzzy, so the guess errs towards risk).
pub fn class_from_description(description: &str) -> Option<ToolClass> {
    let words: Vec<String> = description
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    DESC.iter()
        .find(|(_, keys)| words.iter().any(|w| keys.contains(&w.as_str())))
        .map(|(class, _)| *class)
}

/// Classifies a tool. `definition` is its listed definition (name,
/// description, annotations) when known; `overrides` are the policy's
/// classes for this name (several: the riskiest).
pub fn classify(tool: &str, definition: Option<&Value>, overrides: &[ToolClass]) -> ToolClass {
    let named = class_from_name(tool)
        .or_else(|| {
            definition
                .and_then(|d| d.get("description"))
                .and_then(Value::as_str)
                .and_then(class_from_description)
        })
        .unwrap_or(ToolClass::Unknown);
    // Overrides add classes; they never lower what the name says.
    let mut class = match overrides.iter().max() {
        Some(o) if named == ToolClass::Unknown => *o,
        Some(o) => named.raise(*o),
        None => named,
    };
    // Annotations may only raise risk: `readOnlyHint` never lowers anything;
    // a destructive or open-world tool is at least a write.
    if let Some(ann) = definition.and_then(|d| d.get("annotations")) {
        let hint = |k: &str| ann.get(k).and_then(Value::as_bool) == Some(true);
        let read_only = hint("readOnlyHint");
        if hint("destructiveHint") && !read_only {
            class = class.raise(ToolClass::Write);
        }
        if hint("openWorldHint") && !read_only && class == ToolClass::Unknown {
            class = ToolClass::Send;
        }
    }
    class
}
