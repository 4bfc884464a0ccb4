#!/usr/bin/env bash
# Run every test: unit tests, the bad-pipeline corpus, ABI checks and the multi-process
# pipeline tests. The tests load the plugin cdylibs, so the whole workspace is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --locked
cargo test --workspace --locked
