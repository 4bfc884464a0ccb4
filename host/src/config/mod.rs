//! The pipeline file: serde types, loading, and errors that point at file, line and column.
//!
//! Nothing after planning sees these types; [`crate::plan`] turns them into a `Plan`.

mod diagnostic;
mod keys;
mod metrics;
mod names;
mod supervision;
mod types;

pub use diagnostic::{Diagnostic, Diagnostics, SourceFile};
pub use metrics::MetricsAddress;
pub use names::StageName;
pub use supervision::format_duration;
pub use types::{
    DeviceSpec, DurationSpec, HostSection, InputTransport, Isolation, MpsScope, OnHostLoss, OnLoss, PipelineFile,
    Policy, RestartPolicy, StageDevice, StageSection, Transport,
};

use std::path::Path;

/// Read and parse a pipeline file. Syntax errors, unknown keys and wrong types come back as
/// one diagnostic with its location.
pub fn load(path: &Path) -> Result<(SourceFile, PipelineFile), Diagnostics> {
    let bytes = std::fs::read(path)
        .map_err(|e| Diagnostics::from(Diagnostic::plain(format!("cannot read {}: {e}", path.display()))))?;
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            // Point at the first byte that is not UTF-8, in the part that is.
            let at = e.utf8_error().valid_up_to();
            let bad = e.as_bytes()[at];
            let valid = String::from_utf8_lossy(&e.as_bytes()[..at]).into_owned();
            let source = SourceFile::new(path, valid);
            return Err(Diagnostics::from(
                source
                    .error_at(at..at, format!("the file is not UTF-8 text: byte 0x{bad:02x} here (save it as UTF-8)")),
            ));
        }
    };
    let source = SourceFile::new(path, text);
    let file = parse(&source)?;
    Ok((source, file))
}

/// Parse pipeline text already read: every syntax error, else every unknown key, else the
/// first wrong type or value serde meets.
pub fn parse(source: &SourceFile) -> Result<PipelineFile, Diagnostics> {
    let (document, errors) = toml::de::DeTable::parse_recoverable(source.text());
    if !errors.is_empty() {
        let mut diags = Diagnostics::default();
        let mut previous: Option<(Option<std::ops::Range<usize>>, &str)> = None;
        for (i, e) in errors.iter().enumerate() {
            // The parser can report one fault twice, once per rule it broke.
            if previous == Some((e.span(), e.message())) {
                continue;
            }
            previous = Some((e.span(), e.message()));
            if diags.full() {
                // Locating an error costs a scan of the file: count the rest instead.
                diags.count_more(errors.len() - i);
                break;
            }
            diags.push(toml_error(source, e));
        }
        // In file order, as every other list of problems (the parser finds some late).
        return Err(diags.into_result().expect_err("the parser reported errors"));
    }
    keys::check_known_keys(source, document.get_ref()).into_result()?;
    toml::from_str::<PipelineFile>(source.text()).map_err(|e| Diagnostics::from(toml_error(source, &e)))
}

/// A TOML or serde error as a located diagnostic, naming what the bare "duplicate key" means.
fn toml_error(source: &SourceFile, e: &toml::de::Error) -> Diagnostic {
    let message = e.message().trim_end().to_owned();
    if message == "recursion limit" {
        let at = too_deep_at(source.text());
        return source.error_at(
            at..at,
            "this dotted key has too many parts: the TOML parser reads at most 79 (a pipeline file needs 3)",
        );
    }
    let Some(span) = e.span() else {
        return Diagnostic::plain(format!("{}: {message}", source.path().display()));
    };
    let message = match message.as_str() {
        "duplicate key" => {
            let text = source.text();
            let name = text.get(span.clone()).unwrap_or("").trim();
            let in_header = text[..span.start].rsplit('\n').next().is_some_and(|l| l.trim_start().starts_with('['));
            if in_header { format!("duplicate table `[{name}]`") } else { format!("duplicate key `{name}`") }
        }
        _ => message,
    };
    source.error_at(span, message)
}

/// Where a dotted key first has more parts than the parser's limit, which it reports without a
/// place: the shortest prefix the parser refuses for it ends there. A key's depth never
/// shrinks as a prefix grows, so a binary search finds it in a few dozen parses.
fn too_deep_at(text: &str) -> usize {
    let too_deep = |end: usize| {
        let (_, errors) = toml::de::DeTable::parse_recoverable(&text[..end]);
        errors.iter().any(|e| e.message().trim_end() == "recursion limit")
    };
    let (mut fits, mut refused) = (0, text.len());
    while refused - fits > 1 {
        let mut mid = fits + (refused - fits) / 2;
        while !text.is_char_boundary(mid) {
            mid -= 1;
        }
        if mid == fits {
            break;
        }
        if too_deep(mid) { refused = mid } else { fits = mid }
    }
    // The character that went one level too deep.
    text[..refused].char_indices().next_back().map_or(0, |(i, _)| i)
}
