//! The colour params of the stages converting between RGB and YUV (the built-in `yuv420` and
//! `yuv-to-rgb`): `matrix` and `range`, their values, and their rows of `Plugin::PARAMS`.
//! Both stages take the same names and defaults, so a pipeline writes them the same way on
//! either side of a conversion.

use serde::Deserialize;

use crate::plugin::ParamInfo;

/// The `matrix` param: the luma weights of the YUV frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Matrix {
    /// Kr = 0.2126, Kb = 0.0722 (HD).
    #[default]
    Bt709,
    /// Kr = 0.299, Kb = 0.114 (SD, JPEG).
    Bt601,
}

impl Matrix {
    /// `(Kr, Kb)`.
    pub fn kr_kb(self) -> (f64, f64) {
        match self {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt601 => (0.299, 0.114),
        }
    }
}

/// The `range` param: the signal range of the YUV frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorRange {
    /// Y in 16..=235, U and V in 16..=240.
    #[default]
    Limited,
    /// Y, U and V in 0..=255.
    Full,
}

/// The `matrix` param as a stage's `Plugin::PARAMS` declares it: the kind and default of
/// [`Matrix`]; `description` says what it means in that stage.
pub const fn matrix_param(description: &'static str) -> ParamInfo {
    ParamInfo { name: "matrix", kind: r#""bt709" | "bt601""#, default: r#""bt709""#, range: "", description }
}

/// The `range` param as a stage's `Plugin::PARAMS` declares it: the kind and default of
/// [`ColorRange`]; `description` says what it means in that stage.
pub const fn range_param(description: &'static str) -> ParamInfo {
    ParamInfo { name: "range", kind: r#""limited" | "full""#, default: r#""limited""#, range: "", description }
}
