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

/// Whether a field name (or title) asks for a secret.
pub fn is_sensitive_name(name: &str) -> bool {
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
