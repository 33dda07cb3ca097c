//! Elicitation fields that ask for a secret. The protocol forbids collecting
//! secrets through form elicitation, so the relay and the dashboard decline
//! these by default; both ask this one module.

use serde_json::Value;

const SENSITIVE_EXACT: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "token",
    "secret",
    "key",
    "credential",
    "credentials",
    "auth",
    "private",
    "passphrase",
    "pin",
    "otp",
    "apikey",
    "cvv",
    "ssn",
];
/// Prefixes that mark a field as a secret (`passwordConfirm`, `authorization`).
const SENSITIVE_PREFIX: &[&str] = &[
    "password",
    "passphrase",
    "secret",
    "credential",
    "token",
    "authoriz",
    "authent",
    "apikey",
    "privatekey",
];

/// Splits `apiKey`, `api_key`, `API-KEY` into lower-case words.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Bidi controls and other characters that render as nothing: no honest
/// field name holds one, and one can make a name read as another
/// (`\u{202E}drowssap` shows as "password").
fn has_format_char(name: &str) -> bool {
    name.chars().any(|c| {
        matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{FEFF}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{E0000}'..='\u{E007F}')
    })
}

/// Whether a field name (or title) asks for a secret, or could pass for
/// one that does.
pub fn is_sensitive_name(name: &str) -> bool {
    if has_format_char(name) {
        return true;
    }
    let ws = words(name);
    let joined: String = ws.concat();
    ws.iter().chain(std::iter::once(&joined)).any(|w| {
        SENSITIVE_EXACT.contains(&w.as_str()) || SENSITIVE_PREFIX.iter().any(|p| w.starts_with(p))
    })
}

/// Names of the requested fields that look like secrets (by name or title).
pub fn sensitive_fields(schema: &Value) -> Vec<String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .filter(|(name, def)| {
            is_sensitive_name(name)
                || def
                    .get("title")
                    .and_then(Value::as_str)
                    .is_some_and(is_sensitive_name)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_ask_for_secrets() {
        for name in [
            "password",
            "apiKey",
            "API_KEY",
            "pass\u{200B}word",
            "authorization",
        ] {
            assert!(is_sensitive_name(name), "{name:?}");
        }
        for name in ["repository", "branch", "count", "keyboardLayout"] {
            assert!(!is_sensitive_name(name), "{name:?}");
        }
    }

    /// A title that a bidi override makes read as "password" is declined
    /// like "password" itself.
    #[test]
    fn a_name_disguised_by_a_bidi_override_counts_as_sensitive() {
        assert!(is_sensitive_name("\u{202E}drowssap\u{202C}"));
        assert!(is_sensitive_name("Value\u{2066}"));
        let schema = serde_json::json!({"properties": {
            "v": {"type": "string", "title": "\u{202E}drowssap\u{202C}"},
            "branch": {"type": "string"}
        }});
        assert_eq!(sensitive_fields(&schema), ["v"]);
    }
}
