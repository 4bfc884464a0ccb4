#!/usr/bin/env bash
# Many cameras: N rtsp sources in one pipeline, each into a null sink, for N in $COUNTS. Prints
# per N whether every stream kept its rate, the decoder use (nvidia-smi, cuda domain), the host's
# CPU, and the latency (p50/p99, ms) from a frame's arrival to its sink's end.
#
#   scripts/bench-rtsp.sh                          N = 1 4 16 32 at 1920x1080, 30 frames/s, cuda
#   COUNTS="1 2" SIZE=320x240 DEVICE=cpu SECONDS_EACH=3 scripts/bench-rtsp.sh     smoke test
#   RTSP_URL=rtsp://server:8554 scripts/bench-rtsp.sh   an external server serving /cam0, /cam1, ...
#
# Without RTSP_URL the streams come from scripts/rtsp-test-server.py on this machine (GStreamer's
# RTSP server, with python3-gi and x264: Debian's gir1.2-gst-rtsp-server-1.0, python3-gi,
# gstreamer1.0-plugins-ugly); its x264 encoders take CPU that the table's host CPU includes (on a
# machine without them, serve the cameras from another machine and give RTSP_URL). The host:
# $GPUIPC_HOST, else target/release/gpuipc-host, else target/debug/gpuipc-host.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=${COUNTS:-"1 4 16 32"}
SIZE=${SIZE:-1920x1080}
RATE=${RATE:-30}
DEVICE=${DEVICE:-cuda}
SECONDS_EACH=${SECONDS_EACH:-20}
PYTHON=${GPUIPC_RTSP_PYTHON:-/usr/bin/python3}
HOST=${GPUIPC_HOST:-}
if [ -z "$HOST" ]; then
    for h in target/release/gpuipc-host target/debug/gpuipc-host; do [ -x "$h" ] && HOST=$h && break; done
fi
[ -x "${HOST:-}" ] || { echo "bench-rtsp: no gpuipc-host (build it, or set GPUIPC_HOST)" >&2; exit 2; }
work=$(mktemp -d)
server=""
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    [ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }

printf '%4s %-10s %8s %9s %9s %9s %8s %8s %8s\n' N size "min fps" "all kept" dropped "dec %" "cpu %" "p50 ms" "p99 ms"
for n in $COUNTS; do
    base=${RTSP_URL:-}
    if [ -z "$base" ]; then
        "$PYTHON" scripts/rtsp-test-server.py --port 0 --mounts "$n" --size "$SIZE" --rate "$RATE" >"$work/server.out" 2>"$work/server.err" &
        server=$!
        for _ in $(seq 100); do grep -q '^port ' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
        port=$(awk '/^port /{print $2}' "$work/server.out")
        [ -n "$port" ] || { echo "bench-rtsp: the test server did not start: $(cat "$work/server.err")" >&2; exit 1; }
        base="rtsp://127.0.0.1:$port"
    fi
    frames=$((SECONDS_EACH * RATE))
    {
        printf '[pipeline]\nname = "rtsp-%s"\nframes = %s\ndevice = "%s"\n' "$n" "$frames" "$DEVICE"
        for ((k = 0; k < n; k++)); do
            printf '\n[[stage]]\nname = "cam%s"\nplugin = "rtsp"\nstall_timeout = "off"\nparams = { url = "%s/cam%s" }\n' "$k" "$base" "$k"
            printf '\n[[stage]]\nname = "sink%s"\nplugin = "null"\ninputs = ["cam%s"]\n' "$k" "$k"
        done
    } >"$work/p.toml"
    smi=""
    if [ "$DEVICE" != cpu ] && command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.decoder --format=csv,noheader,nounits -lms 200 >"$work/dec.txt" 2>/dev/null &
        smi=$!
    fi
    read -r busy0 all0 < <(cpu_ticks)
    "$HOST" run "$work/p.toml" --quiet --report "$work/report.json" >"$work/run.out" 2>&1 || {
        echo "bench-rtsp: N=$n failed:" >&2
        tail -20 "$work/run.out" >&2
        exit 1
    }
    read -r busy1 all1 < <(cpu_ticks)
    [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null || true
    dec="-"
    [ -s "$work/dec.txt" ] && dec=$(awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}' "$work/dec.txt")
    cpu=$(awk -v b="$((busy1 - busy0))" -v a="$((all1 - all0))" 'BEGIN {if (a) printf "%.0f", 100*b/a}')
    python3 - "$work/report.json" "$n" "$SIZE" "$RATE" "$dec" "$cpu" <<'PY'
import json, sys
report, n, size, rate, dec, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6]
stages = json.load(open(report))["stages"]
cams = [s for s in stages if s["plugin"] == "rtsp"]
sinks = [s for s in stages if s["name"].startswith("sink")]
min_fps = min(s["fps"] for s in cams)
dropped = sum(s["dropped"] for s in cams)
kept = "yes" if dropped == 0 and min_fps >= 0.95 * rate else "no"
lat = [s["latency"] for s in sinks if s.get("latency")]
p50 = max(l["p50_ms"] for l in lat) if lat else float("nan")
p99 = max(l["p99_ms"] for l in lat) if lat else float("nan")
print(f"{n:4d} {size:<10s} {min_fps:8.1f} {kept:>9s} {dropped:9d} {dec:>9s} {cpu:>8s} {p50:8.1f} {p99:8.1f}")
PY
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=""; fi
done
