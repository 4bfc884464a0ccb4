//! The pipeline file: serde types, loading, and errors that point at file, line and column.
//!
//! Nothing after planning sees these types; [`crate::plan`] turns them into a `Plan`.

mod diagnostic;
mod names;
mod types;

pub use diagnostic::{Diagnostic, Diagnostics, SourceFile};
pub use names::StageName;
pub use types::{DeviceSpec, Isolation, PipelineFile, Policy, StageSection, Transport};

use std::path::Path;

/// Read and parse a pipeline file. Syntax errors, unknown keys and wrong types come back as
/// one diagnostic with its location.
pub fn load(path: &Path) -> Result<(SourceFile, PipelineFile), Diagnostics> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics::from(Diagnostic::plain(format!("cannot read {}: {e}", path.display())))
    })?;
    let source = SourceFile::new(path, text);
    let file = parse(&source)?;
    Ok((source, file))
}

/// Parse pipeline text already read.
pub fn parse(source: &SourceFile) -> Result<PipelineFile, Diagnostics> {
    toml::from_str::<PipelineFile>(source.text()).map_err(|e| {
        let message = e.message().trim_end().to_owned();
        Diagnostics::from(match e.span() {
            Some(span) => source.error_at(span, message),
            None => Diagnostic::plain(format!("{}: {message}", source.path().display())),
        })
    })
}
