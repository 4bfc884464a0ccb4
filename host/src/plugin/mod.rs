//! Plugins on the host side: finding a plugin's cdylib, calling it through the C ABI, and
//! listing and describing them (`gpuipc-host plugins`, `inspect`).

pub mod catalog;
mod loader;
pub mod python;
mod resolve;

pub use loader::{Instance, LoadedPlugin, PluginCallError, PluginMeta, Processed};
pub use resolve::{is_path, resolve};
