//! Property tests fed with generated input, run for a bounded number of cases in every test
//! run: whatever a pipeline file, a control message or a ring header holds, the host answers
//! with an error, never a panic, and its error output stays linear in the input. The inputs
//! that once broke it (a 40 KB line, 5,000 unknown inputs) are kept in
//! `tests/bad_pipelines.rs`; the corpus of bad files in `tests/bad-pipelines/`.

use std::path::Path;

use proptest::prelude::*;

use crate::config::{SourceFile, parse};

/// Pieces of pipeline files, so generated text is often nearly valid and reaches the deeper
/// checks, not only the tokenizer.
const TOKENS: &[&str] = &[
    "[pipeline]\n",
    "[[stage]]\n",
    "name",
    "plugin",
    "inputs",
    "depth",
    "device",
    "policy",
    "transport",
    "params",
    "frames",
    "replicas",
    "on_loss",
    "\"drop\"",
    "isolation",
    "mps",
    "\"private\"",
    "spin_us",
    "restart",
    "max_restarts",
    "restart_window",
    "restart_backoff",
    "stall_timeout",
    " = ",
    "\"gen\"",
    "\"yuv\"",
    "\"generator\"",
    "\"yuv420\"",
    "\"null\"",
    "\"cuda:7\"",
    "\"auto\"",
    "\"latest\"",
    "\"on-failure\"",
    "\"2s\"",
    "\"off\"",
    "[\"gen\"]",
    "[\"yuv\", \"gen\"]",
    "{ width = 0 }",
    "{ width = 64, height = 48 }",
    "1",
    "0",
    "-1",
    "99999999999999999999",
    "1.5",
    "true",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    "%",
    "#",
    "\"",
    "'",
    "\n",
    "\n",
    "\n",
    " ",
    "生成",
    "\t",
];

fn pipeline_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..80).prop_map(|t| t.concat())
}

fn config() -> ProptestConfig {
    ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_pipeline_text_parses_or_is_refused_briefly(text in prop_oneof![pipeline_text(), any::<String>()]) {
        let source = SourceFile::new(Path::new("p.toml"), text.clone());
        if let Err(diags) = parse(&source) {
            let shown = diags.to_string();
            prop_assert!(!diags.is_empty());
            // Linear in the input: a bounded excerpt per kept error, a count for the rest.
            prop_assert!(shown.len() <= 64 * 1024 + 4 * text.len(), "{} bytes for {} of input", shown.len(), text.len());
        }
    }

    #[test]
    fn any_parsed_file_plans_or_is_refused(text in pipeline_text()) {
        let source = SourceFile::new(Path::new("p.toml"), text);
        if let Ok(file) = parse(&source) {
            // Plugins are looked up next to the test binary, where there are none: every
            // stage's plugin is unknown, and everything up to that point is checked for real.
            let _ = crate::plan::build(&source, file);
        }
    }

    #[test]
    fn any_control_message_decodes_or_is_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = serde_json::from_slice::<crate::control::ToStage>(&bytes);
        let _ = serde_json::from_slice::<crate::control::FromStage>(&bytes);
    }

    #[test]
    fn any_ring_header_is_checked_or_refused(
        bytes in prop::collection::vec(any::<u8>(), 0..1024),
        keep_magic in any::<bool>(),
        extra_pages in 0usize..4,
    ) {
        use crate::link::check::RingGeometry;
        use crate::link::header::{MAGIC, RingHeader, VERSION};
        use crate::link::shm::SharedMemory;
        let len = (size_of::<RingHeader>() + extra_pages * 4096).next_multiple_of(4096);
        let shm = SharedMemory::create("gpuipc-fuzz-ring", len).unwrap();
        // Random bytes over the start of the header, sometimes behind a valid magic and
        // version, so the checks past them run too.
        let mut image = bytes.clone();
        if keep_magic {
            let mut prefix = MAGIC.to_le_bytes().to_vec();
            prefix.extend(VERSION.to_le_bytes());
            image.splice(0..0, prefix);
        }
        image.truncate(len);
        #[allow(unsafe_code)]
        // SAFETY: (test) a fresh mapping of `len` bytes, not shared with anyone, `image` fits.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), shm.as_ptr(), image.len()) };
        let _ = RingGeometry::read(&shm, None, "fuzz");
    }
}
