//! Loading a plugin cdylib and calling its descriptor's functions safely.
//!
//! The library stays loaded for as long as the [`LoadedPlugin`] lives; instances borrow it, so
//! no function pointer can outlive its code.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use gpuipc_plugin_api::abi::{
    self, PluginDescriptor, RawCreateContext, RawFrame, RawParamInfo, RawProcessContext, RawStr,
};
use gpuipc_plugin_api::{FrameFormat, PixelFormat};

#[derive(Debug, thiserror::Error)]
pub enum PluginLoadError {
    #[error("cannot load plugin {}: {}", path.display(), loader_reason(source))]
    Open { path: PathBuf, source: libloading::Error },
    #[error("{} is not a gpuipc plugin: it has no `{}` symbol", path.display(), abi::ENTRY_SYMBOL)]
    MissingEntry { path: PathBuf },
    #[error(
        "plugin {} was built for plugin ABI {found_major}.{found_minor}; this host speaks {}.{} (rebuild the plugin against this gpuipc-plugin-api)",
        path.display(), abi::ABI_MAJOR, abi::ABI_MINOR
    )]
    AbiMismatch { path: PathBuf, found_major: u32, found_minor: u32 },
    #[error("plugin {} has a malformed descriptor: {why}", path.display())]
    BadDescriptor { path: PathBuf, why: String },
    #[error("plugin {} runs Python, and {why}", path.display())]
    NoPython { path: PathBuf, why: String },
}

/// `dlopen`'s flag to keep a library mapped after its last `dlclose` (glibc and musl on Linux).
const RTLD_NODELETE: i32 = 0x1000;

/// A failed call into a plugin.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginCallError {
    #[error("{0}")]
    Error(String),
    #[error("plugin panicked: {0}")]
    Panic(String),
}

/// What a plugin says about itself, copied out of its descriptor.
#[derive(Debug, Clone)]
pub struct PluginMeta {
    pub name: String,
    pub version: String,
    pub description: String,
    /// The plugin ABI version it was built for (same major as the host's).
    pub abi: (u32, u32),
    pub domains: u32,
    pub min_inputs: u32,
    pub max_inputs: u32,
    pub accepts: Vec<PixelFormat>,
    pub produces: Vec<PixelFormat>,
    /// Its declared params; `None` when it was built for ABI 1.0, which cannot declare them.
    pub params: Option<Vec<ParamMeta>>,
    /// Whether its instances may run as replicas ([`abi::FLAG_REPLICABLE`]; false before 1.2).
    pub replicable: bool,
    /// Whether it is a live source ([`abi::FLAG_LIVE`]; false before 1.5).
    pub live: bool,
}

/// One declared param, copied out of the plugin (see `gpuipc_plugin_api::ParamInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamMeta {
    pub name: String,
    pub kind: String,
    pub default: String,
    pub range: String,
    pub description: String,
}

/// More params than this is a broken `param_info`, not a plugin.
const MAX_PARAMS: usize = 1024;

/// The most characters of a plugin's name, version and param fields the host keeps; of its
/// descriptions; and of an error text it returns (compile logs can be long).
const MAX_NAME_CHARS: usize = 128;
const MAX_TEXT_CHARS: usize = 1024;
const MAX_ERROR_CHARS: usize = 16 * 1024;

/// Text a plugin hands the host, as the host shows it: at most `max` characters (the rest
/// counted, not shown) and control characters escaped (`\u{1b}`), so a plugin cannot flood
/// the terminal or drive it with escape sequences. `lines` keeps newlines and tabs (error
/// texts, compile logs).
fn shown(text: String, max: usize, lines: bool) -> String {
    let clean = |c: char| !c.is_control() || (lines && (c == '\n' || c == '\t'));
    if text.len() <= max && text.chars().all(clean) {
        return text;
    }
    let mut out = String::new();
    for (kept, c) in text.chars().enumerate() {
        if kept == max {
            let rest = text.chars().count() - kept;
            out.push_str(&format!("... ({rest} more characters)"));
            break;
        }
        if clean(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

impl PluginMeta {
    pub fn supports(&self, domain_bit: u32) -> bool {
        self.domains & domain_bit != 0
    }
}

/// A loaded plugin cdylib and its checked descriptor.
pub struct LoadedPlugin {
    path: PathBuf,
    meta: PluginMeta,
    /// Our copy of the plugin's descriptor: its functions point into the library.
    descriptor: PluginDescriptor,
    // Declared last so it is dropped after everything that points into it.
    _library: libloading::Library,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin").field("path", &self.path).field("meta", &self.meta).finish()
    }
}

impl LoadedPlugin {
    /// Load `path`, resolve the entry symbol once and check the ABI major version before
    /// anything else in the descriptor is read.
    pub fn load(path: &Path) -> Result<LoadedPlugin, PluginLoadError> {
        let path = path.to_owned();
        let python = super::python::needs_python(&path);
        if python {
            super::python::preload().map_err(|why| PluginLoadError::NoPython { path: path.clone(), why })?;
        }
        // SAFETY: loading a library runs its initialisers; a plugin is trusted code the user
        // named in their pipeline, exactly like a GStreamer or dora plugin. A library that
        // runs Python stays loaded for the process's life (`RTLD_NODELETE`): the interpreter
        // and the thread-local state it leaves on every thread that called it outlive any
        // one stage, and a thread ending after the code was unmapped would crash.
        let library = unsafe {
            if python {
                let flags = libloading::os::unix::RTLD_LAZY | libloading::os::unix::RTLD_LOCAL | RTLD_NODELETE;
                libloading::os::unix::Library::open(Some(&path), flags).map(libloading::Library::from)
            } else {
                libloading::Library::new(&path)
            }
        }
        .map_err(|source| PluginLoadError::Open { path: path.clone(), source })?;
        // SAFETY: the symbol's type is fixed by the ABI (`abi::EntryFn`); a library exporting
        // the name with another type is not a gpuipc plugin and is out of our hands.
        let entry: abi::EntryFn = unsafe { library.get::<abi::EntryFn>(abi::ENTRY_SYMBOL.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| PluginLoadError::MissingEntry { path: path.clone() })?;
        let descriptor = entry();
        if descriptor.is_null() {
            return Err(PluginLoadError::BadDescriptor { path, why: "the entry symbol returned null".into() });
        }
        // SAFETY: non-null, and the two leading u32 fields are common to every ABI version.
        let (major, minor) = unsafe { ((*descriptor).abi_major, (*descriptor).abi_minor) };
        if major != abi::ABI_MAJOR {
            return Err(PluginLoadError::AbiMismatch { path, found_major: major, found_minor: minor });
        }
        // SAFETY: same major version, so `size` follows the two versions, as in every 1.x.
        let size = unsafe { (*descriptor).size };
        if size < abi::DESCRIPTOR_1_0_SIZE {
            return Err(PluginLoadError::BadDescriptor {
                path,
                why: format!("descriptor is {size} bytes, expected at least {}", abi::DESCRIPTOR_1_0_SIZE),
            });
        }
        // SAFETY: same major version and at least the 1.0 size: the plugin's descriptor is
        // ours up to `size`, and `copy_descriptor` reads no further.
        let descriptor = unsafe { copy_descriptor(descriptor, size) };
        let meta = read_meta(&descriptor, (major, minor), size)
            .map_err(|why| PluginLoadError::BadDescriptor { path: path.clone(), why })?;
        Ok(LoadedPlugin { path, meta, descriptor, _library: library })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meta(&self) -> &PluginMeta {
        &self.meta
    }

    fn descriptor(&self) -> &PluginDescriptor {
        &self.descriptor
    }

    /// Turn a status code into a result, fetching the plugin's error text.
    fn check(&self, status: i32) -> Result<(), PluginCallError> {
        if status == abi::STATUS_OK {
            return Ok(());
        }
        let mut len = 0usize;
        // SAFETY: `last_error` writes `len` and returns a pointer to that many bytes, valid
        // until this thread's next call into the plugin; we copy them out at once.
        let text = unsafe {
            let ptr = (self.descriptor().last_error)(&mut len);
            RawStr { ptr, len }.to_string_lossy()
        };
        let text = shown(text, MAX_ERROR_CHARS, true);
        let text = if text.is_empty() { format!("failed with status {status}") } else { text };
        Err(match status {
            abi::STATUS_PANIC => PluginCallError::Panic(text.trim_start_matches("panicked: ").to_owned()),
            _ => PluginCallError::Error(text),
        })
    }

    /// Ask the plugin what it outputs for these params and inputs (`None`: a sink).
    pub fn negotiate(&self, params: &str, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>, PluginCallError> {
        let mut output = FrameFormat { pixel: 0, width: 0, height: 0 };
        let mut has_output = 0u32;
        // SAFETY: every pointer is valid for the call, as the ABI requires.
        let status = unsafe {
            (self.descriptor().negotiate)(
                RawStr::from_str(params),
                inputs.as_ptr(),
                inputs.len(),
                &mut output,
                &mut has_output,
            )
        };
        self.check(status)?;
        Ok((has_output != 0).then_some(output))
    }

    /// Create an instance. `ctx`'s pointers must be valid for the call.
    pub fn create(
        &self,
        params: &str,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &RawCreateContext,
    ) -> Result<Instance<'_>, PluginCallError> {
        let mut instance: *mut c_void = std::ptr::null_mut();
        let output_ptr = output.as_ref().map_or(std::ptr::null(), |o| o as *const FrameFormat);
        // SAFETY: every pointer is valid for the call, as the ABI requires.
        let status = unsafe {
            (self.descriptor().create)(
                RawStr::from_str(params),
                inputs.as_ptr(),
                inputs.len(),
                output_ptr,
                ctx,
                &mut instance,
            )
        };
        self.check(status)?;
        if instance.is_null() {
            return Err(PluginCallError::Error("create succeeded but returned no instance".into()));
        }
        Ok(Instance { plugin: self, ptr: instance })
    }
}

/// How many bytes of a plugin's `size`-byte descriptor the host copies: all of ours when the
/// plugin's has them (it may have more, from a newer minor version), else the 1.0 fields.
/// (A field added in a later minor version gets a step here.)
fn copied_len(size: usize) -> usize {
    if size >= size_of::<PluginDescriptor>() {
        size_of::<PluginDescriptor>()
    } else if size >= abi::DESCRIPTOR_1_1_SIZE {
        abi::DESCRIPTOR_1_1_SIZE
    } else {
        abi::DESCRIPTOR_1_0_SIZE
    }
}

/// Stands in for `param_info` of a plugin built for ABI 1.0: no params.
unsafe extern "C" fn no_params(_index: usize, _out: *mut RawParamInfo) -> u32 {
    0
}

/// Copy a plugin's descriptor: the fields its `size` covers from the plugin, later ones
/// (from a newer minor version of the ABI than the plugin's) as the host's stand-ins.
///
/// # Safety
/// `descriptor` must point to a descriptor of this ABI major version with `size` readable
/// bytes (its own `size` field), at least [`abi::DESCRIPTOR_1_0_SIZE`], whose fields hold what
/// the ABI says (valid function pointers, not null). Nothing past `size` is read, so a plugin
/// built for an older minor version is never read out of bounds.
unsafe fn copy_descriptor(descriptor: *const PluginDescriptor, size: usize) -> PluginDescriptor {
    let len = copied_len(size);
    let mut copy = std::mem::MaybeUninit::<PluginDescriptor>::uninit();
    // SAFETY: the fields of 1.1 and 1.2 get the host's stand-ins first, then the first `len` bytes
    // come from the plugin (readable: `len <= size`); together they are every field, each
    // holding a valid value, so the copy is initialised.
    unsafe {
        std::ptr::addr_of_mut!((*copy.as_mut_ptr()).param_info).write(no_params);
        std::ptr::addr_of_mut!((*copy.as_mut_ptr()).flags).write(0);
        std::ptr::copy_nonoverlapping(descriptor.cast::<u8>(), copy.as_mut_ptr().cast::<u8>(), len);
        copy.assume_init()
    }
}

fn read_meta(d: &PluginDescriptor, abi: (u32, u32), size: usize) -> Result<PluginMeta, String> {
    // SAFETY: the descriptor's strings and lists point at the plugin's static data.
    let (name, version, description) =
        unsafe { (d.name.to_string_lossy(), d.version.to_string_lossy(), d.description.to_string_lossy()) };
    let (name, version, description) = (
        shown(name, MAX_NAME_CHARS, false),
        shown(version, MAX_NAME_CHARS, false),
        shown(description, MAX_TEXT_CHARS, false),
    );
    if name.is_empty() {
        return Err("the plugin has no name".into());
    }
    let formats = |list: abi::RawFormats, what: &str| -> Result<Vec<PixelFormat>, String> {
        if list.len == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: as above: `len` codes at `ptr` in the plugin's static data.
        let codes = unsafe { std::slice::from_raw_parts(list.ptr, list.len) };
        codes
            .iter()
            .map(|&c| PixelFormat::from_code(c).ok_or_else(|| format!("unknown pixel format code {c} in `{what}`")))
            .collect()
    };
    if d.min_inputs > d.max_inputs {
        return Err(format!("min_inputs {} exceeds max_inputs {}", d.min_inputs, d.max_inputs));
    }
    let params = if copied_len(size) > abi::DESCRIPTOR_1_0_SIZE { Some(read_params(d)?) } else { None };
    Ok(PluginMeta {
        name,
        version,
        description,
        abi,
        domains: d.domains,
        min_inputs: d.min_inputs,
        max_inputs: d.max_inputs,
        accepts: formats(d.accepts, "accepts")?,
        produces: formats(d.produces, "produces")?,
        params,
        replicable: d.flags & abi::FLAG_REPLICABLE != 0,
        live: abi >= (1, 5) && d.flags & abi::FLAG_LIVE != 0,
    })
}

/// The declared params, asked for one at a time until the plugin says there are no more.
fn read_params(d: &PluginDescriptor) -> Result<Vec<ParamMeta>, String> {
    let mut params = Vec::new();
    loop {
        let empty = RawStr::from_str("");
        let mut raw = RawParamInfo { name: empty, kind: empty, default: empty, range: empty, description: empty };
        // SAFETY: `raw` is writable; `param_info` writes it only when it returns 1, with
        // strings in the plugin's static data, which we copy out at once.
        let param = unsafe {
            if (d.param_info)(params.len(), &mut raw) == 0 {
                break;
            }
            ParamMeta {
                name: shown(raw.name.to_string_lossy(), MAX_NAME_CHARS, false),
                kind: shown(raw.kind.to_string_lossy(), MAX_TEXT_CHARS, false),
                default: shown(raw.default.to_string_lossy(), MAX_TEXT_CHARS, false),
                range: shown(raw.range.to_string_lossy(), MAX_TEXT_CHARS, false),
                description: shown(raw.description.to_string_lossy(), MAX_TEXT_CHARS, false),
            }
        };
        if params.len() == MAX_PARAMS {
            return Err(format!("it declares more than {MAX_PARAMS} params"));
        }
        if param.name.is_empty() {
            return Err(format!("param {} has no name", params.len()));
        }
        params.push(param);
    }
    Ok(params)
}

/// What a successful `process` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    /// The output frame (if any) is written: publish it.
    Frame,
    /// A source has no more frames ([`abi::STATUS_END_OF_STREAM`]): nothing was written.
    EndOfStream,
    /// The output frame is written from damaged data ([`abi::STATUS_DAMAGED`]): publish it
    /// and count it damaged.
    Damaged,
    /// A live source had no frame yet ([`abi::STATUS_NO_FRAME`]): nothing was written; it is
    /// alive and waiting on its network.
    NoFrame,
}

/// One instance of a plugin; destroyed on drop.
pub struct Instance<'p> {
    plugin: &'p LoadedPlugin,
    ptr: *mut c_void,
}

impl Instance<'_> {
    /// Whether the plugin may give a source's output frame a number and timestamp of its own
    /// (`OutputFrame::relay`, plugin ABI 1.3), which the host then reads back from the frame.
    /// An older plugin never writes them; reading them back only from a plugin that may keeps
    /// that promise out of the old plugin's hands.
    pub fn may_relay(&self) -> bool {
        self.plugin.meta().abi >= (1, 3)
    }

    /// Whether the plugin is a live source ([`abi::FLAG_LIVE`], plugin ABI 1.5): its relayed
    /// stamps are its frames' births on the host's clock, and the numbers it skips frames it
    /// dropped.
    pub fn is_live(&self) -> bool {
        self.plugin.meta().live
    }

    /// Process one set of input frames into `output`.
    ///
    /// The frames' memory must stay valid, and the inputs unwritten, for the call; the caller
    /// (the frame loop) holds the ring slots to guarantee that.
    pub fn process(
        &mut self,
        inputs: &[RawFrame],
        output: Option<&mut RawFrame>,
        ctx: &RawProcessContext,
    ) -> Result<Processed, PluginCallError> {
        let output = output.map_or(std::ptr::null_mut(), |o| o as *mut RawFrame);
        // SAFETY: `ptr` came from `create`; `&mut self` keeps calls one at a time; the frame
        // memory is held by the caller as documented above.
        let status =
            unsafe { (self.plugin.descriptor().process)(self.ptr, inputs.as_ptr(), inputs.len(), output, ctx) };
        if status == abi::STATUS_END_OF_STREAM {
            return Ok(Processed::EndOfStream);
        }
        // Only a plugin built for 1.4 or later knows the code; from an older one it means
        // nothing and is an unknown status.
        if status == abi::STATUS_DAMAGED && self.plugin.meta().abi >= (1, 4) {
            return Ok(Processed::Damaged);
        }
        // Only a live source (1.5 or later) may say it has no frame yet.
        if status == abi::STATUS_NO_FRAME && self.is_live() {
            return Ok(Processed::NoFrame);
        }
        self.plugin.check(status).map(|()| Processed::Frame)
    }

    /// End of stream.
    pub fn flush(&mut self) -> Result<(), PluginCallError> {
        // SAFETY: as in `process`.
        let status = unsafe { (self.plugin.descriptor().flush)(self.ptr) };
        self.plugin.check(status)
    }
}

impl Drop for Instance<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `create` and is destroyed exactly once, here.
        unsafe { (self.plugin.descriptor().destroy)(self.ptr) };
    }
}

/// The dynamic loader's own words (libloading keeps them one level down: "dlopen failed" alone
/// says nothing).
fn loader_reason(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(reason) => reason.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_plugins_text_is_shown_short_and_without_control_characters() {
        assert_eq!(shown("grade".into(), 128, false), "grade");
        assert_eq!(shown("red\u{1b}[31mgrade".into(), 128, false), "red\\u{1b}[31mgrade");
        assert_eq!(shown("two\nlines".into(), 128, false), "two\\nlines");
        assert_eq!(shown("two\nlines\tkept".into(), 128, true), "two\nlines\tkept");
        let long = "x".repeat(10 * 1024 * 1024);
        let out = shown(long, 128, false);
        assert_eq!(out, format!("{}... ({} more characters)", "x".repeat(128), 10 * 1024 * 1024 - 128));
    }
}
