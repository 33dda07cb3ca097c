//! Tool classification: `read`, `write`, `send`, `compute` or `unknown`, from
//! the name (split on `_ - .` and camelCase; its riskiest verb), else the
//! description; policy overrides only add risk to what the name says;
//! declared annotations only raise risk. A tool has one class: one that
//! reads and sends (`read_and_email`) is judged as a send, so its results
//! are not kept as read data (a reader's results are).

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

    /// Whether the call's result is kept as taint marks: what a read, a
    /// command (`run_command` printing `.env`) or a tool of unknown kind
    /// returns may be what a later call of another server carries out. The
    /// sequence rules link later calls to these; only reads also count as
    /// the sequence alone (strict mode, the unlinked alert).
    pub fn leaves_marks(self) -> bool {
        matches!(
            self,
            ToolClass::Read | ToolClass::Compute | ToolClass::Unknown
        )
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
/// Verbs that classify a name only as its first word: `read_email` reads
/// mail, `email_team` sends it.
const FIRST_ONLY: &[&str] = &["email"];
/// Verbs that are common nouns too (`get_post`, `list_calls`,
/// `get_workflow_run`, `get_set_members`): after the name's first verb they
/// count only right after a conjunction (`read_and_post`).
const NOUNS_TOO: &[&str] = &[
    "post", "email", "push", "upload", "update", "set", "put", "run", "exec", "eval", "call",
];
const CONJUNCTIONS: &[&str] = &["and", "then", "or"];

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

fn verb_class(word: &str) -> Option<ToolClass> {
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

/// The class the name says: the riskiest of its verbs. The first verb
/// counts (`gmail.send` → send; [`FIRST_ONLY`] words only as the first
/// word); a later one counts when it cannot be a noun or follows a
/// conjunction, since a tool that says it reads and sends is judged by its
/// send (`read_file_send_email`, `lookup_publish`, `fetch_and_post`,
/// `get_or_create` → write), while `get_post` and `read_email` read.
pub fn class_from_name(name: &str) -> Option<ToolClass> {
    let words = name_words(name);
    let first = words.iter().enumerate().position(|(i, w)| {
        verb_class(w).is_some() && (i == 0 || !FIRST_ONLY.contains(&w.as_str()))
    })?;
    let later = (first + 1..words.len()).filter(|&i| {
        let w = words[i].as_str();
        !NOUNS_TOO.contains(&w) || CONJUNCTIONS.contains(&words[i - 1].as_str())
    });
    std::iter::once(first)
        .chain(later)
        .filter_map(|i| verb_class(&words[i]))
        .max()
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

#[cfg(test)]
mod tests {
    use super::{class_from_name, ToolClass};

    fn check(cases: &[(&str, Option<ToolClass>, &str)]) {
        for (name, want, why) in cases {
            assert_eq!(class_from_name(name), *want, "{name}: {why}");
        }
    }

    #[test]
    fn the_riskiest_verb_of_a_name_decides() {
        use ToolClass::*;
        check(&[
            ("read_and_email", Some(Send), "email after a conjunction"),
            ("read_file_send_email", Some(Send), "a second verb phrase"),
            ("fetch_and_post", Some(Send), "post after a conjunction"),
            ("getAndSend", Some(Send), "camelCase"),
            ("search_then_upload", Some(Send), "then"),
            ("lookup_publish", Some(Send), "publish is only a verb"),
            ("find_and_notify", Some(Send), "notify"),
            ("query_http", Some(Send), "http names the network"),
            ("read_send", Some(Send), "send is only a verb"),
            ("send_and_get", Some(Send), "the first verb still counts"),
            ("get_then_exec", Some(Compute), "exec after a conjunction"),
            ("list_and_delete", Some(Write), "delete"),
            ("read_write_file", Some(Write), "write"),
            ("get_or_create_user", Some(Write), "or"),
            ("run_query", Some(Compute), "a later read never lowers"),
        ]);
    }

    #[test]
    fn verbs_that_are_nouns_too_stay_nouns_after_a_verb() {
        use ToolClass::*;
        check(&[
            ("get_post", Some(Read), "a blog post"),
            ("list_posts", Some(Read), "plural"),
            ("read_email", Some(Read), "an email"),
            ("search_email", Some(Read), "an email"),
            ("get_workflow_run", Some(Read), "a CI run"),
            ("list_calls", Some(Read), "plural"),
            ("get_call_transcript", Some(Read), "a phone call"),
            ("get_set_members", Some(Read), "a Redis set"),
            ("get_upload_url", Some(Read), "an upload"),
            ("get_update", Some(Read), "a Telegram update"),
            ("list_push_subscriptions", Some(Read), "push notifications"),
            ("get_eval_results", Some(Read), "an evaluation"),
            ("create_post", Some(Write), "the object of a write"),
            ("delete_email", Some(Write), "the object of a write"),
            (
                "slack_post_message",
                Some(Send),
                "a first verb after a prefix",
            ),
            ("gmail_email", None, "email names a send only first"),
        ]);
    }
}
