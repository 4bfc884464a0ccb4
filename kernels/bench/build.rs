//! The benchmark links four plugin crates as libraries, and each defines the plugin entry
//! symbol (`export_plugin!`), which a release link rejects as defined four times. The
//! benchmark never calls it (it drives the plugins' launchers directly), so which copy the
//! linker keeps does not matter.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--allow-multiple-definition");
}
