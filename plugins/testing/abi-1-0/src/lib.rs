//! `test-abi-1-0`: a sink built as a plugin of ABI 1.0 would be: its descriptor says minor
//! version 0 and ends at `last_error`, before `param_info` (added in 1.1). The host must load
//! and run it, read nothing past the descriptor's `size`, and show its params as not declared.
//!
//! In memory the descriptor is followed by a word that is no function (1): a host that read
//! `param_info` past `size` and called it would crash, not pass.
#![deny(unsafe_code)]

use gpuipc_plugin_api::abi::{
    self, DESCRIPTOR_1_0_SIZE, PluginDescriptor, RawCreateContext, RawFormats, RawFrame, RawProcessContext, RawStr,
};
use gpuipc_plugin_api::{
    CreateContext, Domain, FrameFormat, InputFrame, OutputFrame, PixelFormat, Plugin, PluginInfo, ProcessContext,
    Result,
};

/// No params.
#[derive(gpuipc_plugin_api::serde::Deserialize)]
#[serde(crate = "gpuipc_plugin_api::serde", deny_unknown_fields)]
pub struct Params {}

/// A sink of any format that does nothing.
pub struct Old;

impl Plugin for Old {
    type Params = Params;
    const INFO: PluginInfo = PluginInfo {
        name: "test-abi-1-0",
        version: env!("CARGO_PKG_VERSION"),
        description: "a sink with the ABI 1.0 descriptor (tests only)",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &PixelFormat::ALL,
        produces: &[],
    };
    fn negotiate(_: &Params, _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(None)
    }
    fn create(_: Params, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Self> {
        Ok(Old)
    }
    fn process(&mut self, _: &[InputFrame<'_>], _: Option<&mut OutputFrame<'_>>, _: &ProcessContext) -> Result<()> {
        Ok(())
    }
}

/// `PluginDescriptor` as ABI 1.0 laid it out: every field up to `last_error`.
#[repr(C)]
pub struct Descriptor1_0 {
    pub abi_major: u32,
    pub abi_minor: u32,
    pub size: usize,
    pub name: RawStr,
    pub version: RawStr,
    pub description: RawStr,
    pub domains: u32,
    pub min_inputs: u32,
    pub max_inputs: u32,
    pub accepts: RawFormats,
    pub produces: RawFormats,
    pub negotiate: unsafe extern "C" fn(RawStr, *const FrameFormat, usize, *mut FrameFormat, *mut u32) -> i32,
    pub create: unsafe extern "C" fn(
        RawStr,
        *const FrameFormat,
        usize,
        *const FrameFormat,
        *const RawCreateContext,
        *mut *mut std::ffi::c_void,
    ) -> i32,
    pub process: unsafe extern "C" fn(
        *mut std::ffi::c_void,
        *const RawFrame,
        usize,
        *mut RawFrame,
        *const RawProcessContext,
    ) -> i32,
    pub flush: unsafe extern "C" fn(*mut std::ffi::c_void) -> i32,
    pub destroy: unsafe extern "C" fn(*mut std::ffi::c_void),
    pub last_error: unsafe extern "C" fn(*mut usize) -> *const u8,
}

// The 1.0 layout is the 1.1 one cut before `param_info`.
const _: () = assert!(size_of::<Descriptor1_0>() == DESCRIPTOR_1_0_SIZE);

/// The descriptor and, right after it where 1.1 has `param_info`, a word that is no function.
#[repr(C)]
pub struct Image {
    pub descriptor: Descriptor1_0,
    pub after: usize,
}

/// Lets the image, full of raw pointers, live in a `static`.
pub struct ImageCell(pub Image);

// SAFETY: the image only points at `'static` data never written after start-up (string
// literals, format lists, functions), as `abi::DescriptorCell` does.
#[allow(unsafe_code)]
unsafe impl Sync for ImageCell {}

/// What the export glue builds for `Old`; the 1.0 fields are taken from it.
const NEW: PluginDescriptor = gpuipc_plugin_api::export::descriptor::<Old>();

static IMAGE: ImageCell = ImageCell(Image {
    descriptor: Descriptor1_0 {
        abi_major: abi::ABI_MAJOR,
        abi_minor: 0,
        size: DESCRIPTOR_1_0_SIZE,
        name: NEW.name,
        version: NEW.version,
        description: NEW.description,
        domains: NEW.domains,
        min_inputs: NEW.min_inputs,
        max_inputs: NEW.max_inputs,
        accepts: NEW.accepts,
        produces: NEW.produces,
        negotiate: NEW.negotiate,
        create: NEW.create,
        process: NEW.process,
        flush: NEW.flush,
        destroy: NEW.destroy,
        last_error: NEW.last_error,
    },
    after: 1,
});

/// The entry symbol, by hand, returning the 1.0 descriptor.
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuipc_plugin_entry_v1() -> *const PluginDescriptor {
    // The host reads it as a `PluginDescriptor` only up to `size`, as the ABI says.
    (&IMAGE.0.descriptor as *const Descriptor1_0).cast()
}
