//! Unknown keys, all of them at once. serde stops at the first; a person fixing a file wants
//! the whole list, so the parsed document is checked against the known keys first.

use toml::de::{DeTable, DeValue};

use super::{Diagnostics, SourceFile};

/// Keys of the top level, `[pipeline]`, `[[host]]` and `[[stage]]`, as the serde types in `types.rs`
/// name them (a test keeps the two in step).
pub const TOP_KEYS: &[&str] = &["pipeline", "host", "stage"];
pub const HOST_KEYS: &[&str] = &["name", "control", "data", "link_gbps"];
pub const PIPELINE_KEYS: &[&str] = &[
    "name",
    "frames",
    "device",
    "isolation",
    "mps",
    "spin_us",
    "restart",
    "max_restarts",
    "restart_window",
    "restart_backoff",
    "stall_timeout",
    "on_host_loss",
    "metrics",
];
pub const STAGE_KEYS: &[&str] = &[
    "name",
    "plugin",
    "inputs",
    "depth",
    "device",
    "host",
    "policy",
    "transport",
    "input_transport",
    "replicas",
    "on_loss",
    "params",
    "restart",
    "max_restarts",
    "restart_window",
    "restart_backoff",
    "stall_timeout",
];

fn unknown(source: &SourceFile, table: &DeTable<'_>, known: &[&str], diags: &mut Diagnostics) {
    for key in table.keys() {
        if !known.contains(&key.get_ref().as_ref()) {
            diags.error_at(source, key.span(), format!("unknown field `{}`, {}", key.get_ref(), expected(known)));
        }
    }
}

/// The list of known keys, worded as serde words it, so both checks read the same.
fn expected(known: &[&str]) -> String {
    let quoted: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    match quoted.as_slice() {
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        _ => format!("expected one of {}", quoted.join(", ")),
    }
}

/// Every key that is not a field of the table it sits in. Tables of the wrong type are left
/// for serde to report.
pub fn check_known_keys(source: &SourceFile, document: &DeTable<'_>) -> Diagnostics {
    let mut diags = Diagnostics::default();
    unknown(source, document, TOP_KEYS, &mut diags);
    if let Some(DeValue::Table(pipeline)) = document.get("pipeline").map(|v| v.get_ref()) {
        unknown(source, pipeline, PIPELINE_KEYS, &mut diags);
    }
    if let Some(DeValue::Array(hosts)) = document.get("host").map(|v| v.get_ref()) {
        for host in hosts.iter() {
            if let DeValue::Table(host) = host.get_ref() {
                unknown(source, host, HOST_KEYS, &mut diags);
            }
        }
    }
    if let Some(DeValue::Array(stages)) = document.get("stage").map(|v| v.get_ref()) {
        for stage in stages.iter() {
            if let DeValue::Table(stage) = stage.get_ref() {
                unknown(source, stage, STAGE_KEYS, &mut diags);
            }
        }
    }
    diags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PipelineFile;

    /// serde's own list of a table's fields, from its unknown-field message.
    fn serde_fields(text: &str) -> Vec<String> {
        let e = toml::from_str::<PipelineFile>(text).unwrap_err();
        let message = e.message().to_owned();
        let list = message.split("expected ").nth(1).unwrap_or_else(|| panic!("{message}"));
        let list = list.trim_start_matches("one of ").replace(" or ", ", ");
        list.split(", ").map(|k| k.trim().trim_matches('`').to_owned()).collect()
    }

    #[test]
    fn the_key_lists_match_the_serde_types() {
        assert_eq!(serde_fields("zzz = 1"), TOP_KEYS);
        assert_eq!(serde_fields("[pipeline]\nzzz = 1"), PIPELINE_KEYS);
        assert_eq!(serde_fields("[[stage]]\nname = \"a\"\nplugin = \"b\"\nzzz = 1"), STAGE_KEYS);
        assert_eq!(serde_fields("[[host]]\nname = \"a\"\ncontrol = \"tcp/h:1\"\nzzz = 1"), HOST_KEYS);
    }

    /// The keys in a table of docs/pipeline-file.md under `heading`: rows starting "| `key` |".
    fn documented_keys(heading: &str) -> Vec<String> {
        let doc = include_str!("../../../docs/pipeline-file.md");
        let section = doc.split(heading).nth(1).unwrap_or_else(|| panic!("no {heading} in the docs"));
        let section = section.split("\n## ").next().unwrap().split("\n### ").next().unwrap();
        section.lines().filter_map(|l| l.strip_prefix("| `")).map(|l| l.split('`').next().unwrap().to_owned()).collect()
    }

    #[test]
    fn the_pipeline_file_reference_documents_exactly_these_keys() {
        assert_eq!(documented_keys("## `[pipeline]`"), PIPELINE_KEYS);
        assert_eq!(documented_keys("## `[[stage]]`"), STAGE_KEYS);
        assert_eq!(documented_keys("## `[[host]]`"), HOST_KEYS);
    }
}
