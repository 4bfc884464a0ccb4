//! docs/plugins.md against the crates' docs: its generated part (between the markers) must be
//! exactly what `scripts/plugin-docs.py` makes from the `//!` docs of each built-in plugin's
//! `plugins/<name>/src/lib.rs`, the built-ins being the host's own list (`BUILTINS`, which the
//! script reads from host/src/plugin/resolve.rs). Needs `python3`, which CI has.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The script reads a few dozen small files; far longer than this is a hang.
const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn plugins_md_is_what_the_crates_docs_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ is in the workspace root");
    let script = root.join("scripts/plugin-docs.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg("--check")
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 is needed to check docs/plugins.md with {}: {e}", script.display()));
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{} --check ran longer than {TIMEOUT:?}", script.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(status.success(), "{} --check: {status}\n{out}", script.display());
}
