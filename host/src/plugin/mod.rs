//! Plugins on the host side: finding a plugin's cdylib and calling it through the C ABI.

mod loader;
mod resolve;

pub use loader::{Instance, LoadedPlugin, PluginCallError, PluginMeta};
pub use resolve::resolve;
