//! `Secret<T>`: a value that refuses to be printed or serialized.

use std::fmt;

/// A secret value. `Debug` and `Display` print `<redacted>`; there is no
/// `Serialize` impl, so a derive on a containing type cannot leak it. The
/// only way to the value is [`Secret::expose`], which makes every use
/// greppable.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a value.
    pub fn new(value: T) -> Self {
        Self(value)
    }

    /// Borrows the value. Call sites are the audit list of secret uses.
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Takes the value out.
    pub fn into_inner(self) -> T {
        self.0
    }

    /// Applies `f` to the value, keeping the result secret.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Secret<U> {
        Secret(f(self.0))
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Self(value)
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_never_shows_the_value() {
        let s = Secret::new(String::from("ghp_canary_value_1234567890"));
        for shown in [
            format!("{s:?}"),
            format!("{s}"),
            format!("{s:#?}"),
            format!("{:?}", Some(&s)),
        ] {
            assert!(
                !shown.contains("canary"),
                "secret leaked through formatting: {shown}"
            );
            assert!(
                shown.contains("<redacted>"),
                "expected the redaction marker in {shown}"
            );
        }
        assert_eq!(s.expose(), "ghp_canary_value_1234567890");
    }
}
