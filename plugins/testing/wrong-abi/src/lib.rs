//! `test-wrong-abi`: a descriptor whose ABI major version is not the host's. The host must
//! refuse it before it reads any other field.
// It exports its descriptor by hand, as the macro would not (a wrong ABI version): one of the
// two `#[unsafe(no_mangle)]`s outside plugin-api (test-no-entry has the other).
#![allow(unsafe_code)]

use gpuipc_plugin_api::abi::{ABI_MAJOR, DescriptorCell, PluginDescriptor};
use gpuipc_plugin_api::{
    CreateContext, Domain, FrameFormat, InputFrame, OutputFrame, Plugin, PluginInfo, ProcessContext, Result,
};

pub struct Future;

impl Plugin for Future {
    type Params = ();
    const INFO: PluginInfo = PluginInfo {
        name: "test-wrong-abi",
        version: "9.9.9",
        description: "claims another ABI major version",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[],
        produces: &[],
    };
    fn negotiate(_: &(), _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(None)
    }
    fn create(_: (), _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Self> {
        Ok(Future)
    }
    fn process(&mut self, _: &[InputFrame<'_>], _: Option<&mut OutputFrame<'_>>, _: &ProcessContext) -> Result<()> {
        Ok(())
    }
}

static DESCRIPTOR: DescriptorCell = DescriptorCell(PluginDescriptor {
    abi_major: ABI_MAJOR + 1,
    abi_minor: 7,
    ..gpuipc_plugin_api::export::descriptor::<Future>()
});

/// The entry symbol, by hand, with the wrong major version.
#[unsafe(no_mangle)]
pub extern "C" fn gpuipc_plugin_entry_v1() -> *const PluginDescriptor {
    &DESCRIPTOR.0
}
