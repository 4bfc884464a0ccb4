#!/usr/bin/env bash
# Build in release mode and bundle everything the GPU checks need into one folder that runs
# on a machine with an NVIDIA GPU and its driver but no Rust toolchain:
#
#   scripts/gpu-check.sh [BUNDLE_DIR]     (default: gpu-bundle, ignored by git)
#   # copy BUNDLE_DIR to the GPU machine, then there:
#   BUNDLE_DIR/check.sh                   (writes its results under $OUT or BUNDLE_DIR/results)
#   BUNDLE_DIR/bench.sh                   (the benchmark table of docs/benchmarks.md, likewise)
#   BUNDLE_DIR/bench-tcp.sh               (the TCP bridge against a plain TCP stream, loopback and veth)
#   BUNDLE_DIR/bench-small-frames.sh      (small frames against iceoryx2, cpu only)
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
for crate in gpuipc-cuda gpuipc-nvdec gpuipc-plugin-api gpuipc-generator gpuipc-rgb-process gpuipc-yuv420 gpuipc-yuv-to-rgb gpuipc-test-gpu-fault; do
    test_exe "$crate" --lib | while read -r exe; do cp "$exe" "$bundle/tests/$crate"; done
done
test_exe gpuipc-host --bin gpuipc-host | while read -r exe; do cp "$exe" "$bundle/tests/gpuipc-host"; done
cp "${CARGO_TARGET_DIR:-target}"/release/gpuipc-host "$bundle/bin/"
cp "${CARGO_TARGET_DIR:-target}"/release/libgpuipc_*.so "$bundle/bin/"
# The NVTX recorder check.sh section 14 attaches as Nsight Systems attaches.
cp "${CARGO_TARGET_DIR:-target}"/release/libnvtx_recorder.so "$bundle/bin/"
# The plain TCP stream bench-tcp.sh measures the TCP bridge against.
cp "${CARGO_TARGET_DIR:-target}"/release/gpuipc-tcp-stream "$bundle/bin/"
cp -r pipelines "$bundle/"
git rev-parse --short HEAD > "$bundle/COMMIT"
cp scripts/gpu-check-run.sh "$bundle/check.sh"
cp scripts/bench-run.sh "$bundle/bench.sh"
cp scripts/bench-replicas.sh "$bundle/bench-replicas.sh"
cp scripts/bench-wait.sh "$bundle/bench-wait.sh"
cp scripts/bench-latency.sh "$bundle/bench-latency.sh"
cp scripts/lib-bench.sh "$bundle/lib-bench.sh"  # sourced by bench.sh, bench-wait.sh, bench-latency.sh, bench-compare.sh
cp scripts/bench-compare.sh "$bundle/bench-compare.sh"
cp scripts/trace-hops.py "$bundle/trace-hops.py"
cp scripts/bench-decode.sh "$bundle/bench-decode.sh"
cp scripts/bench-python.sh "$bundle/bench-python.sh"
cp scripts/bench-two-gpus.sh "$bundle/bench-two-gpus.sh"
cp scripts/bench-peer-copies.py "$bundle/bench-peer-copies.py"
cp "${CARGO_TARGET_DIR:-target}"/release/kernel-bench "$bundle/bin/"
cp scripts/bench-kernels.sh "$bundle/bench-kernels.sh"
cp scripts/bench-tcp.sh "$bundle/bench-tcp.sh"  # check.sh section 11 runs it too
# Small frames against iceoryx2 (bench-small-frames.sh): the peer is a workspace of its own
# (its own Cargo.lock and target folder, never built by the host's); without it the script
# runs gpuipc's rows only.
if (cd host/peer-bench/iceoryx2 && env -u CARGO_TARGET_DIR cargo build --release --locked --quiet); then
    cp host/peer-bench/iceoryx2/target/release/iox2-small "$bundle/bin/"
else
    echo "gpu-check: the iceoryx2 peer did not build; bench-small-frames.sh will run gpuipc's rows only" >&2
fi
cp scripts/bench-small-frames.sh "$bundle/bench-small-frames.sh"
chmod +x "$bundle"/*.sh
strip --strip-debug "$bundle"/bin/* "$bundle"/tests/*

# Video (check.sh section 12, bench-decode.sh): clips made here with ffmpeg, which the GPU
# machine may not have, and the cpu decoder's frames of each (their hashes), decoded here in
# the cpu domain, for NVDEC's frames to be compared with there.
cp scripts/video-pipeline.sh "$bundle/video-pipeline.sh"
# (made once into target/video-clips, kept between bundles)
bash scripts/video-clips.sh "${CARGO_TARGET_DIR:-target}/video-clips" bench
mkdir -p "$bundle/video"
cp -r "${CARGO_TARGET_DIR:-target}/video-clips/." "$bundle/video/"
# A damaged stream: 64 bytes overwritten in the middle of an H.264 elementary stream's slices.
mkdir -p "$bundle/video/damaged"
ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i testsrc2=size=320x240:rate=30 -frames:v 30 \
    -c:v libx264 -bf 0 -g 300 -pix_fmt yuv420p -f h264 "$bundle/video/damaged/damaged.h264"
python3 - "$bundle/video/damaged/damaged.h264" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
mid = len(data) // 2
data[mid:mid + 64] = bytes(((i * 37) & 0xff) | 0x11 for i in range(64))
open(sys.argv[1], "wb").write(data)
PY
repo=$PWD
hostbin=$(cd "$bundle/bin" && pwd)/gpuipc-host
mkdir -p "$bundle/video/reference"
video_work=$(mktemp -d)
for clip in "$bundle"/video/corpus/*; do
    name=$(basename "$clip")
    bash scripts/video-pipeline.sh "$(cd "$(dirname "$clip")" && pwd)/$name" > "$video_work/p.toml"
    (cd "$video_work" && rm -rf sums && "$hostbin" run p.toml --device cpu --quiet --checksums sums > /dev/null)
    cp "$video_work/sums/decode0.sum" "$bundle/video/reference/$name.sum"
done
# Every pipelines/video-*.toml with the clip its `# clip:` lines make, and its cpu run's
# checksums (60 frames).
for file in pipelines/video-*.toml; do
    name=$(basename "$file" .toml)
    d=$bundle/video/pipelines/$name
    mkdir -p "$d/clips"
    sed -n 's/^# clip: ffmpeg //p' "$file" | while read -r args; do
        # shellcheck disable=SC2086 # the line is ffmpeg's arguments, split as written
        (cd "$d/clips" && ffmpeg -hide_banner -loglevel error -nostdin -y $args)
    done
    rm -rf "$video_work/run" && mkdir -p "$video_work/run" && cp "$d"/clips/* "$video_work/run/"
    (cd "$video_work/run" && "$hostbin" run "$repo/$file" --device cpu --frames 60 --quiet --checksums sums > /dev/null)
    cp -r "$video_work/run/sums" "$d/reference"
done
# RTSP (check.sh section 15, bench-rtsp.sh): the pure-Python RTSP server, elementary streams
# without B-frames for it to serve (made here: the GPU machine may have no ffmpeg), and the cpu
# decoder's frames of each (their hashes) for NVDEC's frames from the stream to be compared with.
cp scripts/rtsp-file-server.py "$bundle/rtsp-file-server.py"
cp scripts/rtsp-probe.py "$bundle/rtsp-probe.py"
cp scripts/bench-rtsp.sh "$bundle/bench-rtsp.sh"
chmod +x "$bundle/bench-rtsp.sh"
r=$bundle/video/rtsp
mkdir -p "$r/reference"
rtsp_clip() {  # OUT SIZE FRAMES ENCODER-ARGS...
    local out=$1 size=$2 frames=$3
    shift 3
    ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "testsrc2=size=$size:rate=30" -frames:v "$frames" \
        -pix_fmt yuv420p "$@" "$out"
}
rtsp_clip "$r/h264.h264" 640x360 60 -c:v libx264 -bf 0 -g 30 -f h264
rtsp_clip "$r/hevc.hevc" 640x360 60 -c:v libx265 -preset ultrafast -x265-params log-level=error:bframes=0:keyint=30 -f hevc
rtsp_clip "$r/h264-1080p.h264" 1920x1080 300 -c:v libx264 -preset veryfast -bf 0 -g 30 -b:v 8M -f h264
for clip in h264.h264 hevc.hevc; do
    bash scripts/video-pipeline.sh "$(cd "$r" && pwd)/$clip" > "$video_work/p.toml"
    (cd "$video_work" && rm -rf sums && "$hostbin" run p.toml --device cpu --quiet --checksums sums > /dev/null)
    cp "$video_work/sums/decode0.sum" "$r/reference/$clip.sum"
done
rm -rf "$video_work"
du -sh "$bundle"
