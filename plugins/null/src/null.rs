//! The null stage: params (none) and a `process` that returns at once.

use gpuipc_plugin_api::{
    CreateContext, Domain, FrameFormat, InputFrame, OutputFrame, PixelFormat, Plugin, PluginInfo, ProcessContext,
    Result, bail,
};
use serde::Deserialize;

/// The `params` table of a null stage: empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {}

/// A null stage instance.
#[derive(Debug)]
pub struct Null;

impl Plugin for Null {
    type Params = Params;

    // Replicas allowed: it keeps nothing.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "null",
        version: env!("CARGO_PKG_VERSION"),
        description: "discards every frame",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &PixelFormat::ALL,
        produces: &[],
    };

    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if inputs.len() != 1 {
            bail!("null takes 1 input, got {}", inputs.len());
        }
        Ok(None)
    }

    fn create(
        _params: Params,
        _inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        _ctx: &CreateContext<'_>,
    ) -> Result<Null> {
        Ok(Null)
    }

    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::cpu_context;
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    #[test]
    fn takes_every_format_and_has_no_output() {
        let params = parse_params::<Null>("").unwrap();
        let ctx = cpu_context();
        for pixel in PixelFormat::ALL {
            let format = FrameFormat::new(pixel, 5, 3);
            assert_eq!(Null::negotiate(&params, &[format]).unwrap(), None);
            let mut stage = Null::create(params.clone(), &[format], None, &ctx).unwrap();
            let info = FrameInfo::new(format, 0, 0).unwrap();
            let bytes = vec![7; info.layout.total_bytes as usize];
            let input = InputFrame::host(info, &bytes).unwrap();
            let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
            stage.process(&[input], None, &pc).unwrap();
            stage.flush().unwrap();
            assert!(bytes.iter().all(|&b| b == 7));
        }
        assert_eq!(Null::INFO.accepts, PixelFormat::ALL);
        assert!(Null::INFO.produces.is_empty());
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Null>(include_str!("lib.rs"), "");
    }

    #[test]
    fn any_param_is_an_error() {
        let e = parse_params::<Null>("path = \"x\"").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
    }
}
