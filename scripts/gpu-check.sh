#!/usr/bin/env bash
# Build in release mode and bundle everything the GPU checks need into one folder that runs
# on a machine with an NVIDIA GPU and its driver but no Rust toolchain:
#
#   scripts/gpu-check.sh [BUNDLE_DIR]     (default: gpu-bundle, ignored by git)
#   # copy BUNDLE_DIR to the GPU machine, then there:
#   BUNDLE_DIR/check.sh                   (writes its results under $OUT or BUNDLE_DIR/results)
#   BUNDLE_DIR/bench.sh                   (the benchmark table of docs/benchmarks.md, likewise)
#
# The bundle holds gpuipc-host, every plugin library next to it, pipelines/ and check.sh
# (scripts/gpu-check-run.sh). Kernels are compiled into the plugins' sources and built with
# NVRTC on the GPU machine at stage start.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-gpu-bundle}
cargo build --workspace --release --locked
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/tests"
# The GPU tests (named gpu_*): the CUDA crate's own, the host's link backings (the conformance
# suite), and the plugins' GPU-against-CPU ones, run there with the GPU required.
test_exe() {  # CRATE TARGET-KIND-FLAG...: the test executable cargo builds
    cargo test --release --locked -p "$@" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])'
}
for crate in gpuipc-cuda gpuipc-plugin-api gpuipc-generator gpuipc-rgb-process gpuipc-yuv420 gpuipc-yuv-to-rgb gpuipc-test-gpu-fault; do
    test_exe "$crate" --lib | while read -r exe; do cp "$exe" "$bundle/tests/$crate"; done
done
test_exe gpuipc-host --bin gpuipc-host | while read -r exe; do cp "$exe" "$bundle/tests/gpuipc-host"; done
cp "${CARGO_TARGET_DIR:-target}"/release/gpuipc-host "$bundle/bin/"
cp "${CARGO_TARGET_DIR:-target}"/release/libgpuipc_*.so "$bundle/bin/"
cp -r pipelines "$bundle/"
git rev-parse --short HEAD > "$bundle/COMMIT"
cp scripts/gpu-check-run.sh "$bundle/check.sh"
cp scripts/bench-run.sh "$bundle/bench.sh"
cp scripts/bench-replicas.sh "$bundle/bench-replicas.sh"
cp scripts/bench-wait.sh "$bundle/bench-wait.sh"
cp scripts/bench-latency.sh "$bundle/bench-latency.sh"
cp scripts/trace-hops.py "$bundle/trace-hops.py"
chmod +x "$bundle/check.sh" "$bundle/bench.sh" "$bundle/bench-wait.sh" "$bundle/bench-latency.sh"
strip --strip-debug "$bundle"/bin/* "$bundle"/tests/*
du -sh "$bundle"
