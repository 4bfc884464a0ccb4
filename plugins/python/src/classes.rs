//! Finding the class a stage names (`script` or `module`, and `class`), once per process, and
//! turning Python exceptions into the stage's errors, traceback included.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use gpuipc_plugin_api::{Error, Result};
use pyo3::exceptions::PySystemExit;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// Where the class is defined.
pub enum Source {
    /// A Python file, as the params give it.
    Script(String),
    /// An importable module.
    Module(String),
}

impl Source {
    /// From the params: exactly one of `script` and `module`, and `class`, all strings.
    pub fn from_params(params: &toml::Table) -> Result<(Source, String)> {
        let text = |key: &str| -> Result<Option<String>> {
            match params.get(key) {
                None => Ok(None),
                Some(toml::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(other) => Err(Error::new(format!("param `{key}` must be a non-empty string, got {other}"))),
            }
        };
        let source = match (text("script")?, text("module")?) {
            (Some(script), None) => Source::Script(script),
            (None, Some(module)) => Source::Module(module),
            (Some(_), Some(_)) => return Err(Error::new("give param `script` or param `module`, not both")),
            (None, None) => {
                return Err(Error::new(
                    "param `script` (a Python file) or `module` (an importable module) is required",
                ));
            }
        };
        let class = text("class")?
            .ok_or_else(|| Error::new("param `class` (the class in it that does the work) is required"))?;
        Ok((source, class))
    }
}

/// The class name the params give (for messages).
pub fn class_name(params: &toml::Table) -> String {
    params.get("class").and_then(toml::Value::as_str).unwrap_or("?").to_owned()
}

/// The class the params name, loaded on first use in this process.
pub fn load<'py>(py: Python<'py>, params: &toml::Table) -> Result<Bound<'py, PyAny>> {
    static LOADED: Mutex<Option<HashMap<String, Py<PyAny>>>> = Mutex::new(None);
    let (source, class) = Source::from_params(params)?;
    let module = match &source {
        Source::Script(s) => module_of_script(py, s)?,
        Source::Module(m) => module_named(py, m)?,
    };
    let key = format!("{}:{class}", module.getattr("__name__").map(|n| n.to_string()).unwrap_or_default());
    if let Some(found) =
        LOADED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert_with(HashMap::new).get(&key)
    {
        return Ok(found.bind(py).clone());
    }
    let found = match module.getattr(class.as_str()) {
        Ok(c) => c,
        Err(_) => {
            let where_ = match &source {
                Source::Script(s) => format!("script `{s}`"),
                Source::Module(m) => format!("module `{m}`"),
            };
            return Err(Error::new(format!("{where_} defines no `{class}`; its classes: {}", classes_in(py, &module))));
        }
    };
    LOADED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(key, found.clone().unbind());
    Ok(found)
}

/// The module a script file defines, run once per process under a name of its own; its
/// folder first on the module path, so modules beside it import.
fn module_of_script<'py>(py: Python<'py>, script: &str) -> Result<Bound<'py, PyAny>> {
    let path = PathBuf::from(script);
    let full = std::fs::canonicalize(&path).map_err(|e| {
        let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
        Error::new(format!("script `{script}`: {e} (a relative path is from the folder gpuipc-host runs in, {cwd})"))
    })?;
    let name = format!(
        "gpuipc_script_{}",
        full.file_stem().and_then(|s| s.to_str()).unwrap_or("stage").replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let modules = py.import("sys").and_then(|s| s.getattr("modules")).map_err(|e| describe(py, e))?;
    if let Ok(m) = modules.get_item(&name) {
        return Ok(m);
    }
    let folder = full.parent().map(|p| p.display().to_string()).unwrap_or_default();
    put_first_on_path(py, &folder)?;
    let util = py.import("importlib.util").map_err(|e| describe(py, e))?;
    let spec = util
        .call_method1("spec_from_file_location", (&name, full.display().to_string()))
        .map_err(|e| describe(py, e))?;
    if spec.is_none() {
        return Err(Error::new(format!("script `{script}` is not a Python file Python can load")));
    }
    let module = util.call_method1("module_from_spec", (&spec,)).map_err(|e| describe(py, e))?;
    modules.set_item(&name, &module).map_err(|e| describe(py, e))?;
    if let Err(e) = spec.getattr("loader").and_then(|l| l.call_method1("exec_module", (&module,))) {
        let _ = modules.del_item(&name);
        return Err(describe(py, e));
    }
    Ok(module)
}

/// An importable module, with the folder gpuipc-host runs in first on the path (as
/// `python -m` would have it).
fn module_named<'py>(py: Python<'py>, name: &str) -> Result<Bound<'py, PyAny>> {
    let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
    put_first_on_path(py, &cwd)?;
    py.import(name).map(Bound::into_any).map_err(|e| describe(py, e))
}

fn put_first_on_path(py: Python<'_>, folder: &str) -> Result<()> {
    let path = py
        .import("sys")
        .and_then(|s| s.getattr("path"))
        .and_then(|p| Ok(p.cast_into::<PyList>()?))
        .map_err(|e| describe(py, e))?;
    if !path.contains(folder).map_err(|e| describe(py, e))? {
        path.insert(0, folder).map_err(|e| describe(py, e))?;
    }
    Ok(())
}

fn classes_in(py: Python<'_>, module: &Bound<'_, PyAny>) -> String {
    let names = py
        .eval(
            c"lambda m: sorted(n for n, v in vars(m).items() if isinstance(v, type) and v.__module__ == m.__name__)",
            None,
            None,
        )
        .and_then(|f| f.call1((module,)))
        .and_then(|l| l.extract::<Vec<String>>());
    match names {
        Ok(n) if n.is_empty() => "none".to_owned(),
        Ok(n) => n.join(", "),
        Err(_) => "?".to_owned(),
    }
}

/// A Python exception as the stage's error: the traceback as Python prints it (the file and
/// line of every frame), or what `sys.exit` was called with.
pub fn describe(py: Python<'_>, err: PyErr) -> Error {
    if err.is_instance_of::<PySystemExit>(py) {
        let code = err.value(py).getattr("code").map(|c| c.to_string()).unwrap_or_default();
        return Error::new(format!("the Python code called sys.exit({code})"));
    }
    let text = py
        .import("traceback")
        .and_then(|t| t.call_method1("format_exception", (err.get_type(py), err.value(py), err.traceback(py))))
        .and_then(|lines| lines.extract::<Vec<String>>())
        .map(|lines| lines.concat());
    match text {
        Ok(t) => Error::new(format!("Python exception:\n{}", t.trim_end())),
        Err(_) => Error::new(format!("Python exception: {err}")),
    }
}
