//! Stage names: checked once, then trusted everywhere.

use std::fmt;

/// A stage's name: 1 to 64 characters, ASCII letters, digits, `_` and `-`, starting with a
/// letter. It names processes, log lines and report rows, so it stays plain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageName(String);

pub const MAX_STAGE_NAME: usize = 64;

impl StageName {
    pub fn parse(text: &str) -> Result<StageName, String> {
        let Some(first) = text.chars().next() else {
            return Err("stage name is empty".to_owned());
        };
        let length = text.chars().count();
        if length > MAX_STAGE_NAME {
            return Err(format!("stage name `{text}` is {length} characters long; the limit is {MAX_STAGE_NAME}"));
        }
        if !first.is_ascii_alphabetic() {
            return Err(format!("stage name `{text}` must start with an ASCII letter (a-z, A-Z)"));
        }
        if let Some(bad) = text.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
            return Err(format!("stage name `{text}` contains `{bad}`; use ASCII letters, digits, `_` and `-`"));
        }
        Ok(StageName(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_message() {
        assert_eq!(StageName::parse("").unwrap_err(), "stage name is empty");
        assert!(StageName::parse("9lives").unwrap_err().contains("must start with an ASCII letter"));
        assert!(StageName::parse("a b").unwrap_err().contains("contains ` `"));
        assert!(StageName::parse(&"a".repeat(65)).unwrap_err().contains("limit is 64"));
        assert_eq!(StageName::parse("gen-1_a").unwrap().as_str(), "gen-1_a");
    }
}
