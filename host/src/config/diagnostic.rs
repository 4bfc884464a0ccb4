//! Errors about a pipeline file, rendered with the file, line, column and the offending line.
//!
//! What is printed stays linear in the input: a long line is quoted as an excerpt around the
//! column, and past a number of problems the rest are counted, not printed (a 40 KB line of
//! junk gave 2.4 GB of output when every error quoted the whole line).

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A pipeline file's text, kept so errors can quote it.
#[derive(Debug, Clone)]
pub struct SourceFile {
    path: PathBuf,
    text: String,
    /// Byte offset where each line starts, so locating an error does not rescan the file.
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(path: &Path, text: String) -> SourceFile {
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        SourceFile { path: path.to_owned(), text, line_starts }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line - 1];
        (line, self.text[line_start..offset].chars().count() + 1)
    }

    /// An error pointing at `span` of this file.
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let (line, column) = self.line_col(span.start);
        let whole_line = mask_credentials(self.text.lines().nth(line - 1).unwrap_or(""));
        let whole_line = whole_line.as_str();
        let start = span.start.min(self.text.len());
        let end = span.end.clamp(start, self.text.len());
        let span_len = self.text.get(start..end).and_then(|s| s.lines().next()).map_or(1, |s| s.chars().count().max(1));
        let (line_text, caret_column) = excerpt(whole_line, column);
        let span_len = span_len.min(EXCERPT_SIDE);
        Diagnostic {
            message: message.into(),
            location: Some(Location { path: self.path.clone(), line, column, line_text, caret_column, span_len }),
        }
    }
}

/// `line` with the credentials of every URL in it (`rtsp://user:password@host`) masked by as
/// many `*`: a quoted line shows no password, and its columns stay where they were.
pub fn mask_credentials(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'' | '`') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(i) => {
                out.extend(std::iter::repeat_n('*', authority[..i].chars().count()));
                out.push_str(&authority[i..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Characters quoted on each side of the column.
const EXCERPT_SIDE: usize = 80;

/// At most `EXCERPT_SIDE` characters each side of 1-based `column` of `line`, with `…` where
/// cut; and the column in the excerpt.
fn excerpt(line: &str, column: usize) -> (String, usize) {
    // The byte where the column is, then as many characters back and forth as quoted.
    let at = line.char_indices().nth(column.saturating_sub(1)).map_or(line.len(), |(i, _)| i);
    let (before, after) = line.split_at(at);
    let from = before.char_indices().rev().nth(EXCERPT_SIDE - 1).map_or(0, |(i, _)| i);
    let to = after.char_indices().nth(EXCERPT_SIDE).map_or(after.len(), |(i, _)| i);
    let cut_before = from > 0;
    let mut text = String::with_capacity(from.abs_diff(at) + to + 8);
    if cut_before {
        text.push('…');
    }
    text.push_str(&before[from..]);
    text.push_str(&after[..to]);
    if to < after.len() {
        text.push('…');
    }
    (text, before[from..].chars().count() + 1 + usize::from(cut_before))
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    path: PathBuf,
    line: usize,
    column: usize,
    /// The line, or an excerpt of it around the column.
    line_text: String,
    /// Where the column falls in `line_text`.
    caret_column: usize,
    span_len: usize,
}

/// One problem found in a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    location: Option<Location>,
}

impl Diagnostic {
    /// A problem with no place in a file (an unreadable file, say).
    pub fn plain(message: impl Into<String>) -> Diagnostic {
        Diagnostic { message: message.into(), location: None }
    }

    /// `(line, column)`, 1-based, when the problem has a place.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        self.location.as_ref().map(|l| (l.line, l.column))
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(l) = &self.location else {
            return write!(f, "error: {}", self.message);
        };
        let gutter = l.line.to_string().len();
        writeln!(f, "{}:{}:{}: error: {}", l.path.display(), l.line, l.column, self.message)?;
        writeln!(f, "{:gutter$} |", "")?;
        writeln!(f, "{} | {}", l.line, l.line_text)?;
        let pad: String =
            l.line_text.chars().take(l.caret_column - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        write!(f, "{:gutter$} | {pad}{}", "", "^".repeat(l.span_len))
    }
}

/// Every problem found, in file order. At most [`MAX_KEPT`] are kept; the rest are counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    kept: Vec<Diagnostic>,
    more: usize,
}

/// Problems kept (and printed) from one file; a file with more is reported with a count.
pub const MAX_KEPT: usize = 50;

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        if self.kept.len() < MAX_KEPT {
            self.kept.push(d);
        } else {
            self.more += 1;
        }
    }

    /// An error at `span` of `source`; once enough are kept, only counted, so locating it
    /// (a scan of its line) is not paid for: thousands of errors on one long line stay cheap.
    pub fn error_at(&mut self, source: &SourceFile, span: Range<usize>, message: impl Into<String>) {
        if self.full() {
            self.more += 1;
        } else {
            self.kept.push(source.error_at(span, message));
        }
    }

    /// Whether another problem would only be counted (so it need not be made).
    pub fn full(&self) -> bool {
        self.kept.len() >= MAX_KEPT
    }

    /// Count `n` more problems without keeping them.
    pub fn count_more(&mut self, n: usize) {
        self.more += n;
    }

    /// Every problem found, kept or only counted.
    pub fn len(&self) -> usize {
        self.kept.len() + self.more
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn into_result(mut self) -> Result<(), Diagnostics> {
        if self.is_empty() {
            return Ok(());
        }
        self.kept.sort_by_key(|d| d.line_col());
        Err(self)
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics { kept: vec![d], more: 0 }
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.kept.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            writeln!(f, "{d}")?;
        }
        if self.more > 0 {
            writeln!(f, "\n... and {} more error{} not shown", self.more, if self.more == 1 { "" } else { "s" })?;
        }
        match self.len() {
            1 => write!(f, "1 error"),
            n => write!(f, "{n} errors"),
        }
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_quoted_around_the_column() {
        let line = format!("{}X{}", "a".repeat(1000), "b".repeat(1000));
        let source = SourceFile::new(Path::new("p.toml"), line.clone());
        let d = source.error_at(1000..1001, "here");
        let text = d.to_string();
        assert!(text.starts_with("p.toml:1:1001: error: here"), "{text}");
        assert!(text.len() < 600, "{} bytes for one error", text.len());
        let quoted = text.lines().nth(2).unwrap();
        let caret = text.lines().nth(3).unwrap();
        // The caret sits under the X.
        let x = quoted.chars().position(|c| c == 'X').unwrap();
        assert_eq!(caret.chars().position(|c| c == '^'), Some(x), "{quoted}\n{caret}");
    }

    #[test]
    fn credentials_in_a_quoted_line_are_masked_in_place() {
        assert_eq!(
            mask_credentials(r#"params = { url = "rtsp://admin:s3cret@cam:554/x" }"#),
            r#"params = { url = "rtsp://************@cam:554/x" }"#
        );
        assert_eq!(mask_credentials("url = \"rtsp://cam/x\""), "url = \"rtsp://cam/x\"");
    }

    #[test]
    fn past_the_kept_problems_the_rest_are_counted() {
        let source = SourceFile::new(Path::new("p.toml"), "x".repeat(10));
        let mut diags = Diagnostics::default();
        for i in 0..(MAX_KEPT + 25) {
            diags.error_at(&source, i % 10..i % 10 + 1, format!("problem {i}"));
        }
        let text = diags.into_result().unwrap_err().to_string();
        assert_eq!(text.matches(": error: ").count(), MAX_KEPT);
        assert!(text.ends_with(&format!("... and 25 more errors not shown\n{} errors", MAX_KEPT + 25)), "{text}");
    }
}
