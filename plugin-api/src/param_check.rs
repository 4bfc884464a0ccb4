//! Checks, for a plugin's tests, that its declared params ([`Plugin::PARAMS`], what
//! `gpuipc-host inspect` shows) agree with the `Params` type that really reads them and with
//! the params table of its docs.
//!
//! ```ignore
//! #[test]
//! fn declared_params_match_the_params_type_and_the_docs() {
//!     gpuipc_plugin_api::param_check::assert_declared::<MyStage>(include_str!("lib.rs"), "");
//! }
//! ```

use std::fmt::Display;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::export::parse_params;
use crate::plugin::{ParamInfo, Plugin};

/// Panics with every problem [`problems`] and [`doc_table_problems`] find. `required` is TOML
/// text giving every required param a valid value (empty when there is none).
pub fn assert_declared<P: Plugin>(lib_rs: &str, required: &str)
where
    P::Params: PartialEq + std::fmt::Debug,
{
    let mut all = problems::<P>(required);
    all.extend(doc_table_problems::<P>(lib_rs));
    assert!(all.is_empty(), "{} declares its params wrongly:\n  {}", P::INFO.name, all.join("\n  "));
}

/// What is wrong with `P::PARAMS` against `P::Params`: names that are not exactly the keys the
/// type reads, defaults that do not parse or are not the type's defaults, empty fields.
/// `required` is TOML text giving every required param a valid value.
pub fn problems<P: Plugin>(required: &str) -> Vec<String>
where
    P::Params: PartialEq + std::fmt::Debug,
{
    let mut problems = Vec::new();
    let declared: Vec<&str> = P::PARAMS.iter().map(|p| p.name).collect();
    match keys_read::<P::Params>() {
        None => problems.push("cannot list the keys `Params` reads (not a plain struct?)".to_owned()),
        Some(keys) => {
            for key in &keys {
                if !declared.contains(key) {
                    problems.push(format!("`Params` reads `{key}`, which PARAMS does not declare"));
                }
            }
            for name in &declared {
                if !keys.contains(name) {
                    problems.push(format!("PARAMS declares `{name}`, which `Params` does not read"));
                }
            }
        }
    }
    for (i, p) in P::PARAMS.iter().enumerate() {
        if declared[..i].contains(&p.name) {
            problems.push(format!("PARAMS declares `{}` twice", p.name));
        }
        if p.kind.is_empty() || p.default.is_empty() || p.description.is_empty() {
            problems.push(format!("param `{}`: kind, default and description must not be empty", p.name));
        }
    }
    let baseline = match parse_params::<P>(required) {
        Ok(params) => params,
        Err(e) => {
            problems.push(format!("the required params `{required}` do not parse: {e}"));
            return problems;
        }
    };
    let mut all_defaults = required.to_owned();
    for p in P::PARAMS {
        if p.default == ParamInfo::REQUIRED {
            if !required.lines().any(|l| l.split('=').next().is_some_and(|k| k.trim() == p.name)) {
                problems.push(format!("param `{}` is required, but the test gives it no value", p.name));
            }
            continue;
        }
        if p.default == ParamInfo::NONE {
            continue;
        }
        let line = format!("\n{} = {}", p.name, p.default);
        match parse_params::<P>(&format!("{required}{line}")) {
            Ok(params) if params == baseline => all_defaults += &line,
            Ok(params) => problems.push(format!(
                "param `{}`: its declared default {} is not the default ({params:?} is not {baseline:?})",
                p.name, p.default
            )),
            Err(e) => {
                problems.push(format!("param `{}`: its declared default {} does not parse: {e}", p.name, p.default))
            }
        }
    }
    if problems.is_empty() && parse_params::<P>(&all_defaults).ok().as_ref() != Some(&baseline) {
        problems.push(format!("every declared default at once does not give the defaults: {all_defaults}"));
    }
    problems
}

/// What differs between `P::PARAMS` and the params table of `lib_rs`'s `//!` docs (the table
/// after the `# Params` heading; none when the plugin has no params). A row reads
/// `` | `name` | kind, range | `default` | description | ``: the type cell is the kind, then
/// `, ` and the range when there is one; backticks and `\|` are markdown only.
pub fn doc_table_problems<P: Plugin>(lib_rs: &str) -> Vec<String> {
    let rows = doc_table(lib_rs);
    let mut problems = Vec::new();
    if rows.len() != P::PARAMS.len() {
        problems.push(format!("the docs' params table has {} rows, PARAMS {} entries", rows.len(), P::PARAMS.len()));
    }
    for (row, p) in rows.iter().zip(P::PARAMS) {
        let type_cell = if p.range.is_empty() { p.kind.to_owned() } else { format!("{}, {}", p.kind, p.range) };
        let expected = [p.name.to_owned(), type_cell, p.default.to_owned(), p.description.to_owned()];
        let found = [plain(&row[0]), plain(&row[1]), plain(&row[2]), row[3].clone()];
        for ((what, e), f) in ["name", "type", "default", "meaning"].iter().zip(&expected).zip(&found) {
            if e != f {
                problems.push(format!("param `{}`: {what} is `{e}` in PARAMS but `{f}` in the docs", p.name));
            }
        }
    }
    problems
}

/// The cells of each row of the `# Params` table, header and separator left out.
fn doc_table(lib_rs: &str) -> Vec<Vec<String>> {
    let docs = lib_rs.lines().filter_map(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l));
    let mut in_params = false;
    let mut rows = Vec::new();
    for line in docs {
        if let Some(heading) = line.strip_prefix('#') {
            in_params = heading.trim_start_matches('#').trim() == "Params";
            continue;
        }
        if in_params && line.starts_with('|') {
            rows.push(cells(line));
        }
    }
    // The header row, then the `|---|` row.
    rows.into_iter().skip(2).collect()
}

/// A table row's cells, split at each `|` that is not escaped as `\|`.
fn cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut chars = line.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                cells.last_mut().expect("never empty").push('|');
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().expect("never empty").push(c),
        }
    }
    if cells.last().is_some_and(|c| c.trim().is_empty()) {
        cells.pop();
    }
    cells.iter_mut().for_each(|c| *c = c.trim().to_owned());
    cells.resize(4, String::new());
    cells
}

/// A cell's text without the markdown code marks.
fn plain(cell: &str) -> String {
    cell.replace('`', "")
}

/// The keys a derived `Deserialize` struct reads (its `FIELDS`), or none for `()`; `None` for
/// types that are not read as a struct.
fn keys_read<T: for<'de> Deserialize<'de>>() -> Option<Vec<&'static str>> {
    let mut keys = None;
    let _ = T::deserialize(KeysProbe(&mut keys));
    keys
}

/// A deserializer that only notes the field list it is asked for, then stops.
struct KeysProbe<'a>(&'a mut Option<Vec<&'static str>>);

#[derive(Debug)]
struct Stop;

impl Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped after the field list")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: Display>(_: T) -> Stop {
        Stop
    }
}

impl<'de> Deserializer<'de> for KeysProbe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = Some(fields.to_vec());
        Err(Stop)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        *self.0 = Some(Vec::new());
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateContext, FrameFormat, InputFrame, OutputFrame, PluginInfo, ProcessContext, Result};

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Params {
        level: u32,
        invert: bool,
    }

    impl Default for Params {
        fn default() -> Params {
            Params { level: 1, invert: false }
        }
    }

    /// Declares `level` with a wrong default, leaves `invert` out and declares `gain`.
    struct Wrong;

    impl Plugin for Wrong {
        type Params = Params;
        const INFO: PluginInfo = PluginInfo {
            name: "wrong",
            version: "0",
            description: "",
            domains: &[],
            min_inputs: 0,
            max_inputs: 0,
            accepts: &[],
            produces: &[],
        };
        const PARAMS: &'static [ParamInfo] = &[
            ParamInfo { name: "level", kind: "integer", default: "2", range: "", description: "the level" },
            ParamInfo { name: "gain", kind: "float", default: "1.0", range: "", description: "the gain" },
        ];
        fn negotiate(_: &Params, _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok(None)
        }
        fn create(_: Params, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Wrong> {
            Ok(Wrong)
        }
        fn process(&mut self, _: &[InputFrame<'_>], _: Option<&mut OutputFrame<'_>>, _: &ProcessContext) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_disagreement_with_the_params_type_is_found() {
        let problems = problems::<Wrong>("");
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert_eq!(problems[0], "`Params` reads `invert`, which PARAMS does not declare");
        assert_eq!(problems[1], "PARAMS declares `gain`, which `Params` does not read");
        assert!(problems[2].starts_with("param `level`: its declared default 2 is not the default"), "{}", problems[2]);
        assert!(
            problems[3].starts_with(
                "param `gain`: its declared default 1.0 does not parse: param `gain`: unknown field `gain`"
            ),
            "{}",
            problems[3]
        );
    }

    #[test]
    fn every_disagreement_with_the_docs_is_found() {
        let lib_rs = "//! # Params\n//!\n//! | key | type | default | meaning |\n//! |---|---|---|---|\n\
                      //! | `level` | integer, 1..=9 | `2` | the level |\n//! | `gain` | float | `1.0` | gain |\n";
        let problems = doc_table_problems::<Wrong>(lib_rs);
        assert_eq!(
            problems,
            [
                "param `level`: type is `integer` in PARAMS but `integer, 1..=9` in the docs",
                "param `gain`: meaning is `the gain` in PARAMS but `gain` in the docs",
            ]
        );
        assert_eq!(
            doc_table_problems::<Wrong>("//! No params.\n"),
            ["the docs' params table has 0 rows, PARAMS 2 entries"]
        );
    }

    #[test]
    fn cells_split_at_unescaped_bars() {
        let row = r#"| `pattern` | `"bars"` \| `"box"` | `"bars"` | what to draw |"#;
        assert_eq!(cells(row), [r#"`pattern`"#, r#"`"bars"` | `"box"`"#, r#"`"bars"`"#, "what to draw"]);
    }

    #[test]
    fn the_table_is_the_one_under_params() {
        let lib_rs = "//! # Params\n//!\n//! | key | type | default | meaning |\n//! |---|---|---|---|\n\
                      //! | `a` | integer | `1` | one |\n//!\n//! # Other\n//!\n//! | x | y | z | w |\n";
        assert_eq!(doc_table(lib_rs), [["`a`", "integer", "`1`", "one"]]);
    }
}
