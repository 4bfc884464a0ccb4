#!/usr/bin/env bash
# Handoff rate of a two-stage pipeline (generator -> null) between two processes, with the
# waiting stage spinning 20 us before it sleeps (the default) and sleeping at once (parked).
# 64x64 frames (pipelines/handoff-64.toml) and, for the framework's floor, 1x1 frames.
#
#   scripts/bench-handoff.sh [FRAMES]      (default 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-200000}
cargo build --workspace --release --quiet
host=target/release/gpuipc-host
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's/width = 64, height = 64/width = 1, height = 1/' pipelines/handoff-64.toml > "$work/handoff-1.toml"

echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for file in pipelines/handoff-64.toml "$work/handoff-1.toml"; do
    for spin in 20 0; do
        "$host" run "$file" --device cpu --quiet --frames "$frames" --spin-us "$spin" --report "$work/report.json" > /dev/null
        python3 - "$work/report.json" "$file" "$spin" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
sink = next(s for s in report["stages"] if s["name"] == "sink")
size = "64x64" if "64" in sys.argv[2].rsplit("/", 1)[-1] else "1x1"
mode = "spinning (20 us)" if sys.argv[3] != "0" else "parked"
print(f"{size:>6} {mode:17} {sink['frames']:>8} frames {sink['fps']:>12,.0f} frames/s "
      f"{1e9 / sink['fps']:>8.0f} ns/frame  dropped {sink['dropped']}")
PY
    done
done
# The same 64x64 generator -> null in one process, no link: the generator's own cost.
"$host" run pipelines/handoff-64.toml --device cpu --in-process --quiet --frames "$frames" --report "$work/report.json" > /dev/null
python3 - "$work/report.json" <<'PY'
import json, sys
sink = next(s for s in json.load(open(sys.argv[1]))["stages"] if s["name"] == "sink")
print(f" 64x64 in-process (no link) {sink['frames']:>8} frames {sink['fps']:>12,.0f} frames/s {1e9 / sink['fps']:>8.0f} ns/frame")
PY
