//! What `gpuipc-host plugins` and `gpuipc-host inspect` show: every plugin a pipeline can name,
//! found by the same rule as a stage's `plugin = "..."`, and one plugin in full.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

use gpuipc_plugin_api::PixelFormat;
use gpuipc_plugin_api::abi::{ABI_MAJOR, ABI_MINOR, DOMAIN_CPU, DOMAIN_CUDA};

use super::loader::{LoadedPlugin, PluginMeta};
use super::resolve::{self, BUILTINS, Resolved, SearchPath};

/// The text of `gpuipc-host plugins`: the built-in plugins, then the others found on the
/// search path, each with the file a pipeline naming it would load; then warnings (a file
/// that another of the same name hides, a missing built-in, a `GPUIPC_PLUGIN_PATH` folder
/// that does not exist).
pub fn list() -> String {
    let search = SearchPath::from_env();
    let mut warnings = Vec::new();
    for dir in &search.env {
        if !dir.is_dir() {
            warnings.push(format!("GPUIPC_PLUGIN_PATH names {}, which is not a folder", dir.display()));
        }
    }
    let mut names: BTreeSet<String> = BTreeSet::new();
    for dir in search.folders() {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for entry in entries.flatten() {
            if let Some(name) = entry.file_name().to_str().and_then(resolve::name_of_file)
                && entry.path().is_file()
            {
                names.insert(name);
            }
        }
    }
    let others: Vec<&String> = names.iter().filter(|n| !resolve::is_builtin(n)).collect();
    let width = BUILTINS.iter().map(|b| b.len()).chain(others.iter().map(|n| n.len())).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "built-in plugins (a built-in name means the library beside gpuipc-host):");
    for name in BUILTINS {
        match found(&search, name) {
            Some(resolved) => {
                entry(&mut out, name, &resolved.path, width);
                warnings.extend(resolved.shadow_warning(name));
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {name:width$}  -      missing: no {} beside gpuipc-host",
                    resolve::file_name(name)
                );
                warnings.push(format!("the built-in `{name}` is missing; build the workspace, or reinstall"));
            }
        }
    }
    let _ = writeln!(out, "\nother plugins on the search path:");
    if others.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for name in others {
        let resolved = found(&search, name).expect("listed from a folder of the search path");
        entry(&mut out, name, &resolved.path, width);
        warnings.extend(resolved.shadow_warning(name));
    }
    let _ = writeln!(out, "\nsearch path: {}", search.describe());
    let _ = writeln!(out, "this host speaks plugin ABI {ABI_MAJOR}.{ABI_MINOR}");
    for warning in warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

/// `name` looked up as a pipeline would: the file used and the ones it hides.
fn found(search: &SearchPath, name: &str) -> Option<Resolved> {
    let file = resolve::file_name(name);
    let mut paths = search.lookup_order(name).into_iter().map(|d| d.join(&file)).filter(|p| p.is_file());
    Some(Resolved { path: paths.next()?, shadowed: paths.collect() })
}

/// One plugin's lines of the listing: name, version and description, then its file.
fn entry(out: &mut String, name: &str, path: &Path, width: usize) {
    let indent = " ".repeat(width + 4);
    match LoadedPlugin::load(path) {
        Ok(plugin) => {
            let meta = plugin.meta();
            let _ =
                writeln!(out, "  {name:width$}  {:6} {}{}", meta.version, meta.description, calls_itself(name, meta));
        }
        Err(e) => {
            let _ = writeln!(out, "  {name:width$}  -      cannot load: {e}");
        }
    }
    let _ = writeln!(out, "{indent}{}", path.display());
}

/// A note when the plugin's own name (the one plans show) is not the name it is found by.
fn calls_itself(name: &str, meta: &PluginMeta) -> String {
    if meta.name == name { String::new() } else { format!(" (calls itself `{}`)", meta.name) }
}

/// The text of `gpuipc-host inspect PLUGIN` (a name, as a pipeline's `plugin` would give it,
/// or a path, relative to the current folder), or why there is none.
pub fn inspect(plugin: &str) -> Result<String, String> {
    let cwd = std::env::current_dir().unwrap_or_default();
    let resolved = resolve::resolve(plugin, &cwd).map_err(|e| e.to_string())?;
    let loaded = LoadedPlugin::load(&resolved.path).map_err(|e| e.to_string())?;
    let meta = loaded.meta();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {}{}",
        meta.name,
        meta.version,
        if plugin.contains('/') { String::new() } else { calls_itself(plugin, meta) }
    );
    if !meta.description.is_empty() {
        let _ = writeln!(out, "  {}", meta.description);
    }
    let _ = writeln!(out);
    let builtin = !resolve::is_path(plugin) && resolve::is_builtin(plugin);
    let rows = [
        ("file", format!("{}{}", resolved.path.display(), if builtin { " (built-in)" } else { "" })),
        ("plugin ABI", format!("{}.{}", meta.abi.0, meta.abi.1)),
        ("domains", domains(meta.domains)),
        ("inputs", inputs(meta)),
        ("accepts", formats(&meta.accepts, "-")),
        ("produces", formats(&meta.produces, "nothing (a sink)")),
        ("replicas", replicas(meta)),
    ];
    for (key, value) in rows {
        let _ = writeln!(out, "{key:10}  {value}");
    }
    let _ = writeln!(out);
    match &meta.params {
        None => {
            let _ = writeln!(
                out,
                "params: not declared (built for plugin ABI {}.{}, which cannot carry them; see the plugin's docs)",
                meta.abi.0, meta.abi.1
            );
        }
        Some(params) if params.is_empty() => {
            let _ = writeln!(out, "params: none declared");
        }
        Some(params) => {
            let _ = writeln!(out, "params:");
            for p in params {
                let mut what = vec![p.kind.clone()];
                what.extend((!p.range.is_empty()).then(|| p.range.clone()));
                what.push(match p.default.as_str() {
                    "required" => "required".to_owned(),
                    "none" => "optional".to_owned(),
                    default => format!("default {default}"),
                });
                let _ = writeln!(out, "  {}: {}", p.name, what.join(", "));
                for line in wrap(&p.description, 90) {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
    }
    if builtin && meta.name == "python" {
        let _ = write!(out, "\n{}", super::python::INTERFACE);
    }
    if let Some(warning) = resolved.shadow_warning(plugin) {
        let _ = writeln!(out, "\nwarning: {warning}");
    }
    Ok(out)
}

fn domains(bits: u32) -> String {
    let names: Vec<&str> = [(DOMAIN_CPU, "cpu"), (DOMAIN_CUDA, "cuda")]
        .into_iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name)
        .collect();
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// Whether `replicas = N` may run it, and why not.
fn replicas(meta: &PluginMeta) -> String {
    if meta.max_inputs == 0 {
        "one instance only (a source)".into()
    } else if meta.replicable && meta.min_inputs == 0 {
        "allowed where it has inputs (replicas = N shares its frames among N processes); as a source, one instance"
            .into()
    } else if meta.replicable {
        "allowed (replicas = N shares its frames among N processes)".into()
    } else if meta.abi < (1, 2) {
        format!("one instance only (built for plugin ABI {}.{}, which cannot say otherwise)", meta.abi.0, meta.abi.1)
    } else {
        "one instance only (it keeps state from one frame to the next)".into()
    }
}

fn inputs(meta: &PluginMeta) -> String {
    match (meta.min_inputs, meta.max_inputs) {
        (0, 0) => "none (a source)".to_owned(),
        (min, max) if min == max => min.to_string(),
        (min, max) => format!("{min} to {max} (aligned by sequence number)"),
    }
}

fn formats(list: &[PixelFormat], none: &str) -> String {
    if list.is_empty() {
        return none.to_owned();
    }
    list.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// `text` in lines of at most `width` characters, broken at spaces (a longer word stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_breaks_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("a verylongword b", 4), ["a", "verylongword", "b"]);
        assert_eq!(wrap("", 4), [""]);
    }

    #[test]
    fn domains_and_inputs_read_as_words() {
        assert_eq!(domains(DOMAIN_CPU | DOMAIN_CUDA), "cpu, cuda");
        assert_eq!(domains(0), "none");
    }
}
