//! `test-faulty`: copies its input to its output, and misbehaves when asked, so the host's
//! handling of every kind of plugin failure can be tested with real processes.
//!
//! Params: `mode` (see [`faulty::Mode`]), `at` (frame index where a per-frame fault happens,
//! default 0), `sink` (bool, default false: no output), `delay_us` (pretend work per frame),
//! `gate` (a FIFO `create` waits on until a test writes to it and closes it).
#![deny(unsafe_code)] // but for the writes it tries on purpose (`faulty::write_into`, `tamper`)

mod faulty;
mod tamper;

gpuipc_plugin_api::export_plugin!(faulty::Faulty);
