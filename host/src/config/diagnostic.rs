//! Errors about a pipeline file, rendered with the file, line, column and the offending line.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A pipeline file's text, kept so errors can quote it.
#[derive(Debug, Clone)]
pub struct SourceFile {
    path: PathBuf,
    text: String,
}

impl SourceFile {
    pub fn new(path: &Path, text: String) -> SourceFile {
        SourceFile { path: path.to_owned(), text }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    /// An error pointing at `span` of this file.
    pub fn error_at(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        let (line, column) = self.line_col(span.start);
        let line_text = self.text.lines().nth(line - 1).unwrap_or("").to_owned();
        let span_len = self.text[span.start.min(self.text.len())..span.end.min(self.text.len())]
            .lines()
            .next()
            .map_or(1, |s| s.chars().count().max(1));
        Diagnostic {
            message: message.into(),
            location: Some(Location { path: self.path.clone(), line, column, line_text, span_len }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Location {
    path: PathBuf,
    line: usize,
    column: usize,
    line_text: String,
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
        let pad: String = l.line_text.chars().take(l.column - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
        write!(f, "{:gutter$} | {pad}{}", "", "^".repeat(l.span_len))
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    pub fn into_result(mut self) -> Result<(), Diagnostics> {
        if self.0.is_empty() {
            return Ok(());
        }
        self.0.sort_by_key(|d| d.line_col());
        Err(self)
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics(vec![d])
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            writeln!(f, "{d}")?;
        }
        match self.0.len() {
            1 => write!(f, "1 error"),
            n => write!(f, "{n} errors"),
        }
    }
}

impl std::error::Error for Diagnostics {}
