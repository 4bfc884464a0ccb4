//! The `extern "C"` shims behind [`crate::export_plugin!`]: they turn raw ABI arguments into the
//! safe types of [`crate::Plugin`], catch panics, and keep the last error text for the host.
//! They run [`crate::Plugin::check`] before `negotiate` and before `create`, so the params are
//! checked once, the same way, at plan time and when a stage starts.
//!
//! This is the one module of plugin-api with `unsafe` code; every block says what the host
//! guarantees for it.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{
    self, PluginDescriptor, RawCreateContext, RawFormats, RawFrame, RawParamInfo, RawProcessContext, RawStr,
};
use crate::error::{Error, Result};
use crate::format::FrameFormat;
use crate::frame::{DeviceBuffer, FrameInfo, InputFrame, OutputFrame};
use crate::plugin::{CreateContext, Domain, Plugin, ProcessContext};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last_error(message: String) {
    LAST_ERROR.with_borrow_mut(|e| *e = message);
}

/// Run `f`, turning an error or a panic into a status code and the last error text.
fn guarded(f: impl FnOnce() -> Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => abi::STATUS_OK,
        Ok(Err(e)) => {
            set_last_error(e.message().to_owned());
            abi::STATUS_ERROR
        }
        Err(payload) => {
            let text = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            set_last_error(format!("panicked: {text}"));
            abi::STATUS_PANIC
        }
    }
}

/// Deserialise a stage's params (TOML text) and refuse keys the params type did not read.
pub fn parse_params<P: Plugin>(text: &str) -> Result<P::Params> {
    // No params at all is also what `type Params = ()` reads (an empty table is not a unit
    // to serde, so `()` alone would refuse every stage).
    if text.trim().is_empty()
        && let Ok(params) = <P::Params as serde::Deserialize>::deserialize(serde::de::value::UnitDeserializer::<
            serde::de::value::Error,
        >::new())
    {
        return Ok(params);
    }
    let deserializer = toml::de::Deserializer::parse(text).map_err(|e| params_error(text, &e))?;
    let mut unknown = Vec::new();
    let params = serde_ignored::deserialize(deserializer, |path| unknown.push(path.to_string()))
        .map_err(|e| params_error(text, &e))?;
    match unknown.first() {
        None => Ok(params),
        Some(key) => Err(Error::new(format!("unknown param `{key}`"))),
    }
}

/// Name the key an error is about: the span points into `text`, one `key = value` a line.
fn params_error(text: &str, e: &toml::de::Error) -> Error {
    let message = in_words(e.message().trim_end());
    let message = message.as_str();
    // Params are keys of the stage's `params` table, not "fields".
    if let Some(rest) = message.strip_prefix("missing field ") {
        return Error::new(format!("missing param {rest}"));
    }
    let key = e.span().and_then(|span| {
        let line_start = text[..span.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
        let line = text[line_start..].lines().next()?;
        let key = line.split_once('=')?.0.trim();
        (!key.is_empty()).then(|| key.trim_matches('"').to_owned())
    });
    match key {
        Some(key) => Error::new(format!("param `{key}`: {message}")),
        None => Error::new(message.to_owned()),
    }
}

/// serde's names of Rust types as a pipeline file's author reads them: "expected f64" says
/// "expected a number".
fn in_words(message: &str) -> String {
    let mut text = message.to_owned();
    for (rust, words) in [
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u32", "expected a whole number of 0 or more"),
        ("expected u64", "expected a whole number of 0 or more"),
        ("expected usize", "expected a whole number of 0 or more"),
        ("expected i32", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected a boolean", "expected true or false"),
        ("invalid type: map, expected unit", "this plugin takes no params"),
    ] {
        if let Some(at) = text.find(rust)
            && !text[at + rust.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            text.replace_range(at..at + rust.len(), words);
        }
    }
    text
}

/// The descriptor of plugin `P`, built at compile time by [`crate::export_plugin!`].
pub const fn descriptor<P: Plugin>() -> PluginDescriptor {
    let info = P::INFO;
    let mut domains = 0;
    let mut i = 0;
    while i < info.domains.len() {
        domains |= match info.domains[i] {
            Domain::Cpu => abi::DOMAIN_CPU,
            Domain::Cuda => abi::DOMAIN_CUDA,
        };
        i += 1;
    }
    PluginDescriptor {
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        size: size_of::<PluginDescriptor>(),
        name: RawStr::from_str(info.name),
        version: RawStr::from_str(info.version),
        description: RawStr::from_str(info.description),
        domains,
        min_inputs: info.min_inputs,
        max_inputs: info.max_inputs,
        // PixelFormat is repr(u32), so a slice of it is a slice of codes.
        accepts: RawFormats { ptr: info.accepts.as_ptr() as *const u32, len: info.accepts.len() },
        produces: RawFormats { ptr: info.produces.as_ptr() as *const u32, len: info.produces.len() },
        negotiate: negotiate::<P>,
        create: create::<P>,
        process: process::<P>,
        flush: flush::<P>,
        destroy: destroy::<P>,
        last_error,
        param_info: param_info::<P>,
        flags: if P::REPLICABLE { abi::FLAG_REPLICABLE } else { 0 } | if P::LIVE { abi::FLAG_LIVE } else { 0 },
    }
}

/// # Safety
/// `raw` must describe readable UTF-8 for the duration of the call (the host's contract).
unsafe fn params_text(raw: RawStr) -> String {
    // SAFETY: forwarded from the caller.
    unsafe { raw.to_string_lossy() }
}

/// # Safety
/// `ptr` must point to `n` formats, or be anything when `n` is 0.
unsafe fn formats<'a>(ptr: *const FrameFormat, n: usize) -> &'a [FrameFormat] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the host passes `n` initialised formats that outlive the call.
    unsafe { std::slice::from_raw_parts(ptr, n) }
}

unsafe extern "C" fn negotiate<P: Plugin>(
    params: RawStr,
    inputs: *const FrameFormat,
    n_inputs: usize,
    output: *mut FrameFormat,
    has_output: *mut u32,
) -> i32 {
    guarded(|| {
        // SAFETY: host contract: params text and `n_inputs` formats are valid for the call,
        // `output` and `has_output` are writable.
        let (text, inputs) = unsafe { (params_text(params), formats(inputs, n_inputs)) };
        P::INFO.check_inputs(inputs)?;
        let params = parse_params::<P>(&text)?;
        P::check(&params, inputs)?;
        let result = P::negotiate(&params, inputs)?;
        // SAFETY: see above.
        unsafe {
            *has_output = result.is_some() as u32;
            if let Some(format) = result {
                *output = format;
            }
        }
        Ok(())
    })
}

unsafe extern "C" fn create<P: Plugin>(
    params: RawStr,
    inputs: *const FrameFormat,
    n_inputs: usize,
    output: *const FrameFormat,
    ctx: *const RawCreateContext,
    instance: *mut *mut c_void,
) -> i32 {
    guarded(|| {
        // SAFETY: host contract: every pointer is valid for the call; `output` may be null.
        let (text, inputs, output, ctx) =
            unsafe { (params_text(params), formats(inputs, n_inputs), output.as_ref().copied(), &*ctx) };
        crate::log::install(ctx.log);
        // The CUDA crate's messages (kernel cache, failed releases) go there too.
        crate::cuda::bridge_logs();
        // SAFETY: the stage name and cache dir are valid strings for the call.
        let (stage, cache_dir) = unsafe { (ctx.stage.to_string_lossy(), ctx.kernel_cache_dir.to_string_lossy()) };
        let cache_dir = std::path::PathBuf::from(cache_dir);
        let context = CreateContext {
            stage: &stage,
            domain: if ctx.domain == abi::DOMAIN_CUDA { Domain::Cuda } else { Domain::Cpu },
            device_ordinal: u32::try_from(ctx.device_ordinal).ok(),
            cuda_context: ctx.cuda_context as usize,
            cuda_stream: ctx.cuda_stream as usize,
            kernel_cache_dir: (!cache_dir.as_os_str().is_empty()).then_some(cache_dir.as_path()),
        };
        P::INFO.check_inputs(inputs)?;
        let params = parse_params::<P>(&text)?;
        P::check(&params, inputs)?;
        let plugin = P::create(params, inputs, output, &context)?;
        // SAFETY: `instance` is writable; the box is reclaimed by `destroy`.
        unsafe { *instance = Box::into_raw(Box::new(plugin)) as *mut c_void };
        Ok(())
    })
}

#[inline]
fn frame_info(raw: &RawFrame) -> FrameInfo {
    FrameInfo { format: raw.format, layout: raw.layout, seq: raw.seq, timestamp_ns: raw.timestamp_ns }
}

/// # Safety
/// A host-domain `raw` must point to `raw.len` bytes readable for `'a` and not written by
/// anyone during that time.
#[inline]
unsafe fn input_frame<'a>(raw: &RawFrame) -> Result<InputFrame<'a>> {
    let info = frame_info(raw);
    if raw.domain == abi::DOMAIN_CUDA {
        return Ok(InputFrame::device(info, DeviceBuffer { addr: raw.addr, len: raw.len }));
    }
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { std::slice::from_raw_parts(raw.addr as *const u8, raw.len as usize) };
    InputFrame::host(info, bytes).ok_or_else(|| Error::new("input frame shorter than its layout"))
}

/// # Safety
/// A host-domain `raw` must point to `raw.len` bytes writable for `'a` that nothing else reads
/// or writes during that time.
#[inline]
unsafe fn output_frame<'a>(raw: &RawFrame) -> Result<OutputFrame<'a>> {
    let info = frame_info(raw);
    if raw.domain == abi::DOMAIN_CUDA {
        return Ok(OutputFrame::device(info, DeviceBuffer { addr: raw.addr, len: raw.len }));
    }
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { std::slice::from_raw_parts_mut(raw.addr as *mut u8, raw.len as usize) };
    OutputFrame::host(info, bytes).ok_or_else(|| Error::new("output frame shorter than its layout"))
}

unsafe extern "C" fn process<P: Plugin>(
    instance: *mut c_void,
    inputs: *const RawFrame,
    n_inputs: usize,
    output: *mut RawFrame,
    ctx: *const RawProcessContext,
) -> i32 {
    let (mut ended, mut damaged, mut no_frame) = (false, false, false);
    let status = guarded(|| {
        // SAFETY: host contract: `instance` came from `create` and is used by one thread at a
        // time; `inputs` holds `n_inputs` frames whose memory the host keeps valid and
        // unwritten for the call, `output` (or null) is a frame only this call writes.
        let (plugin, raw_inputs, raw_output, ctx) = unsafe {
            let raw_inputs: &[RawFrame] =
                if n_inputs == 0 { &[] } else { std::slice::from_raw_parts(inputs, n_inputs) };
            (&mut *(instance as *mut P), raw_inputs, output.as_mut(), &*ctx)
        };
        // One input (most stages) on the stack: a heap allocation a frame is a tenth of a
        // tiny frame's whole cost; more inputs in a vector.
        let (mut one, mut many) = (None, None);
        let frames: &[InputFrame] = if let [raw] = raw_inputs {
            // SAFETY: see above.
            let frame = unsafe { input_frame(raw)? };
            std::slice::from_ref(one.insert(frame))
        } else {
            let mut frames = Vec::with_capacity(raw_inputs.len());
            for raw in raw_inputs {
                // SAFETY: see above.
                frames.push(unsafe { input_frame(raw)? });
            }
            many.insert(frames)
        };
        let mut out = match &raw_output {
            // SAFETY: see above.
            Some(raw) => Some(unsafe { output_frame(raw)? }),
            None => None,
        };
        let context = ProcessContext { frame_index: ctx.frame_index, cuda_stream: ctx.cuda_stream as usize };
        plugin.process(frames, out.as_mut(), &context)?;
        ended = out.as_ref().is_some_and(OutputFrame::ends_stream);
        damaged = out.as_ref().is_some_and(OutputFrame::is_damaged);
        no_frame = out.as_ref().is_some_and(OutputFrame::has_no_frame);
        if no_frame && !P::LIVE {
            return Err(Error::new(
                "had no frame yet (OutputFrame::no_frame_yet), which only a live source (Plugin::LIVE) may say",
            ));
        }
        // A relayed frame's number and timestamp go back in the host's frame (ABI 1.3); a
        // frame not relayed leaves them as the host wrote them.
        if let (Some(raw), Some(out)) = (raw_output, out.as_ref())
            && out.relays()
        {
            raw.seq = out.info().seq;
            raw.timestamp_ns = out.info().timestamp_ns;
        }
        Ok(())
    });
    match status {
        abi::STATUS_OK if ended => abi::STATUS_END_OF_STREAM,
        abi::STATUS_OK if no_frame => abi::STATUS_NO_FRAME,
        abi::STATUS_OK if damaged => abi::STATUS_DAMAGED,
        status => status,
    }
}

unsafe extern "C" fn flush<P: Plugin>(instance: *mut c_void) -> i32 {
    // SAFETY: `instance` came from `create` and is not used concurrently.
    guarded(|| unsafe { &mut *(instance as *mut P) }.flush())
}

unsafe extern "C" fn destroy<P: Plugin>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    let _ = guarded(|| {
        // SAFETY: `instance` came from `create` and the host calls `destroy` once, last.
        drop(unsafe { Box::from_raw(instance as *mut P) });
        Ok(())
    });
}

unsafe extern "C" fn last_error(len: *mut usize) -> *const u8 {
    LAST_ERROR.with_borrow(|e| {
        // SAFETY: `len` is writable (host contract). The pointer stays valid until this
        // thread's next call into the plugin, which is what the ABI promises.
        unsafe { *len = e.len() };
        e.as_ptr()
    })
}

unsafe extern "C" fn param_info<P: Plugin>(index: usize, out: *mut RawParamInfo) -> u32 {
    let Some(param) = P::PARAMS.get(index) else { return 0 };
    let raw = RawParamInfo {
        name: RawStr::from_str(param.name),
        kind: RawStr::from_str(param.kind),
        default: RawStr::from_str(param.default),
        range: RawStr::from_str(param.range),
        description: RawStr::from_str(param.description),
    };
    // SAFETY: `out` is writable (host contract); the strings are `'static`.
    unsafe { *out = raw };
    1
}

/// Export a [`Plugin`] implementation as this cdylib's plugin.
///
/// ```ignore
/// gpuipc_plugin_api::export_plugin!(MyStage);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// The plugin's entry symbol, looked up by the gpuipc host.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub extern "C" fn gpuipc_plugin_entry_v1() -> *const $crate::abi::PluginDescriptor {
            static DESCRIPTOR: $crate::abi::DescriptorCell =
                $crate::abi::DescriptorCell($crate::export::descriptor::<$plugin>());
            &DESCRIPTOR.0
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ParamInfo, PluginInfo};

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Params {
        level: u8,
    }

    /// Refuses `level = 0` in `check`; would panic if `negotiate` or `create` saw it.
    struct Fill;

    impl Plugin for Fill {
        type Params = Params;
        const INFO: PluginInfo = PluginInfo {
            name: "fill",
            version: "0",
            description: "",
            domains: &[Domain::Cpu],
            min_inputs: 0,
            max_inputs: 0,
            accepts: &[],
            produces: &[],
        };
        const PARAMS: &'static [ParamInfo] = &[ParamInfo {
            name: "level",
            kind: "integer",
            default: ParamInfo::REQUIRED,
            range: "1..=255",
            description: "the level",
        }];
        fn check(params: &Params, _: &[FrameFormat]) -> Result<()> {
            match params.level {
                0 => Err(Error::new("param `level` must be 1..=255, got 0")),
                _ => Ok(()),
            }
        }
        fn negotiate(params: &Params, _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            assert_ne!(params.level, 0, "negotiate before check");
            Ok(None)
        }
        fn create(params: Params, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Fill> {
            assert_ne!(params.level, 0, "create before check");
            Ok(Fill)
        }
        fn process(&mut self, _: &[InputFrame<'_>], _: Option<&mut OutputFrame<'_>>, _: &ProcessContext) -> Result<()> {
            Ok(())
        }
    }

    fn last_error_text(d: &PluginDescriptor) -> String {
        let mut len = 0;
        // SAFETY: as the host does: `len` is writable, the text is read before the next call.
        unsafe { RawStr { ptr: (d.last_error)(&mut len), len }.to_string_lossy() }
    }

    #[test]
    fn check_runs_before_negotiate_and_before_create() {
        let d = descriptor::<Fill>();
        let mut output = FrameFormat { pixel: 0, width: 0, height: 0 };
        let mut has_output = 7;
        let mut instance = std::ptr::null_mut();
        let ctx = RawCreateContext {
            stage: RawStr::from_str("s"),
            domain: abi::DOMAIN_CPU,
            device_ordinal: -1,
            cuda_context: std::ptr::null_mut(),
            cuda_stream: std::ptr::null_mut(),
            kernel_cache_dir: RawStr::from_str(""),
            log: None,
        };
        for (text, status) in [("level = 0", abi::STATUS_ERROR), ("level = 3", abi::STATUS_OK)] {
            let params = RawStr::from_str(text);
            // SAFETY: every pointer is valid for the call, as the host passes them.
            let negotiated = unsafe { (d.negotiate)(params, std::ptr::null(), 0, &mut output, &mut has_output) };
            assert_eq!(negotiated, status, "negotiate {text}: {}", last_error_text(&d));
            // SAFETY: as above.
            let created = unsafe { (d.create)(params, std::ptr::null(), 0, std::ptr::null(), &ctx, &mut instance) };
            assert_eq!(created, status, "create {text}: {}", last_error_text(&d));
            if status == abi::STATUS_ERROR {
                assert_eq!(last_error_text(&d), "param `level` must be 1..=255, got 0");
                assert!(instance.is_null());
            }
        }
        assert_eq!(has_output, 0);
        // SAFETY: made by `create` above, destroyed once.
        unsafe { (d.destroy)(instance) };
    }

    #[test]
    fn param_info_lists_the_declared_params_then_stops() {
        let d = descriptor::<Fill>();
        assert_eq!(d.size, size_of::<PluginDescriptor>());
        assert!(abi::DESCRIPTOR_1_0_SIZE < d.size);
        let empty = RawStr::from_str("");
        let mut raw = RawParamInfo { name: empty, kind: empty, default: empty, range: empty, description: empty };
        // SAFETY: `raw` is writable; the strings it gets are 'static.
        unsafe {
            assert_eq!((d.param_info)(0, &mut raw), 1);
            assert_eq!(raw.name.to_string_lossy(), "level");
            assert_eq!(raw.default.to_string_lossy(), "required");
            assert_eq!(raw.range.to_string_lossy(), "1..=255");
            assert_eq!((d.param_info)(1, &mut raw), 0);
        }
    }

    /// A source of 1x1 gray frames that ends its stream at `seq` 2, and fails at `seq` 5
    /// after asking to end it.
    struct Ends;

    impl Plugin for Ends {
        type Params = ();
        const INFO: PluginInfo = PluginInfo {
            name: "ends",
            version: "0",
            description: "",
            domains: &[Domain::Cpu],
            min_inputs: 0,
            max_inputs: 0,
            accepts: &[],
            produces: &[crate::PixelFormat::Gray8],
        };
        fn negotiate(_: &(), _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok(Some(FrameFormat::new(crate::PixelFormat::Gray8, 1, 1)))
        }
        fn create(_: (), _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Ends> {
            Ok(Ends)
        }
        fn process(
            &mut self,
            _: &[InputFrame<'_>],
            out: Option<&mut OutputFrame<'_>>,
            _: &ProcessContext,
        ) -> Result<()> {
            let out = out.expect("a source has an output");
            match out.info().seq {
                2 => out.end_stream(),
                // Not a live source: it may not say it has no frame yet.
                7 => out.no_frame_yet(),
                5 => {
                    out.end_stream();
                    return Err(Error::new("failed"));
                }
                _ => out.plane_mut(0).expect("host memory").row_mut(0)[0] = 9,
            }
            Ok(())
        }
    }

    #[test]
    fn a_plugin_without_params_takes_none_and_refuses_some() {
        parse_params::<Ends>("").unwrap();
        parse_params::<Ends>("  \n").unwrap();
        let e = parse_params::<Ends>("level = 3").unwrap_err().to_string();
        assert!(e.contains("this plugin takes no params"), "{e}");
    }

    #[test]
    fn a_source_that_ends_its_stream_returns_end_of_stream() {
        let d = descriptor::<Ends>();
        let format = FrameFormat::new(crate::PixelFormat::Gray8, 1, 1);
        let layout = crate::FrameLayout::for_format(format).unwrap();
        let mut bytes = vec![0u8; layout.total_bytes as usize];
        let ctx = RawProcessContext { frame_index: 0, cuda_stream: std::ptr::null_mut() };
        let mut instance = Ends;
        let ptr = &mut instance as *mut Ends as *mut c_void;
        for (seq, status, byte) in [
            (0, abi::STATUS_OK, 9),
            (2, abi::STATUS_END_OF_STREAM, 0),
            (5, abi::STATUS_ERROR, 0),
            (7, abi::STATUS_ERROR, 0),
        ] {
            bytes[0] = 0;
            let mut out = RawFrame {
                format,
                layout,
                domain: abi::DOMAIN_CPU,
                addr: bytes.as_mut_ptr() as u64,
                len: bytes.len() as u64,
                seq,
                timestamp_ns: 0,
            };
            // SAFETY: `ptr` is a live instance used by this thread only; `out` points at
            // `bytes`, which nothing else touches during the call.
            let got = unsafe { (d.process)(ptr, std::ptr::null(), 0, &mut out, &ctx) };
            assert_eq!((got, bytes[0]), (status, byte), "seq {seq}");
        }
        assert_eq!(
            last_error_text(&d),
            "had no frame yet (OutputFrame::no_frame_yet), which only a live source (Plugin::LIVE) may say"
        );
    }

    /// A source of 1x1 gray frames that relays `seq + 10` with timestamp 77 on odd `seq`s.
    struct Relays;

    impl Plugin for Relays {
        type Params = ();
        const INFO: PluginInfo = PluginInfo {
            name: "relays",
            version: "0",
            description: "",
            domains: &[Domain::Cpu],
            min_inputs: 0,
            max_inputs: 0,
            accepts: &[],
            produces: &[crate::PixelFormat::Gray8],
        };
        fn negotiate(_: &(), _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok(Some(FrameFormat::new(crate::PixelFormat::Gray8, 1, 1)))
        }
        fn create(_: (), _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Relays> {
            Ok(Relays)
        }
        fn process(
            &mut self,
            _: &[InputFrame<'_>],
            out: Option<&mut OutputFrame<'_>>,
            _: &ProcessContext,
        ) -> Result<()> {
            let out = out.expect("a source has an output");
            let seq = out.info().seq;
            if seq % 2 == 1 {
                out.relay(seq + 10, 77);
                assert_eq!((out.info().seq, out.info().timestamp_ns), (seq + 10, 77));
            }
            Ok(())
        }
    }

    #[test]
    fn a_relayed_frame_carries_its_own_seq_and_timestamp_back_to_the_host() {
        let d = descriptor::<Relays>();
        let format = FrameFormat::new(crate::PixelFormat::Gray8, 1, 1);
        let layout = crate::FrameLayout::for_format(format).unwrap();
        let mut bytes = vec![0u8; layout.total_bytes as usize];
        let ctx = RawProcessContext { frame_index: 0, cuda_stream: std::ptr::null_mut() };
        let mut instance = Relays;
        let ptr = &mut instance as *mut Relays as *mut c_void;
        for (seq, want) in [(4, (4, 5)), (5, (15, 77))] {
            let mut out = RawFrame {
                format,
                layout,
                domain: abi::DOMAIN_CPU,
                addr: bytes.as_mut_ptr() as u64,
                len: bytes.len() as u64,
                seq,
                timestamp_ns: 5,
            };
            // SAFETY: `ptr` is a live instance used by this thread only; `out` points at
            // `bytes`, which nothing else touches during the call.
            let got = unsafe { (d.process)(ptr, std::ptr::null(), 0, &mut out, &ctx) };
            assert_eq!(got, abi::STATUS_OK);
            assert_eq!((out.seq, out.timestamp_ns), want, "seq {seq}");
        }
    }
}
