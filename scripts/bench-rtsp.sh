#!/usr/bin/env bash
# Many cameras: N rtsp sources in one pipeline, each into a null sink, for N in $COUNTS. Measures
# the steady state: once every stream has handed on its first frame (the run's metrics endpoint,
# `run --metrics 127.0.0.1:0`, polled every 0.1 s) it waits SETTLE seconds (5), scrapes the
# endpoint, waits SECONDS_EACH, scrapes it again and stops the run (SIGINT: it drains). SETTLE
# keeps start-up out of the window: every camera's first key frame comes within a few ms of the
# others' (one PLAY each as the pipeline starts), and in the cuda domain each stage then makes its
# NVDEC decoder at that key frame, N processes at once; a stream whose decoder came late (over
# about a second: its queue holds QUEUE = 30 access units) drops the rest of its second GOP, and
# the frames it queued meanwhile arrive seconds late. That tail (the drop shows when the third key
# frame is handed on, about 2 s after the first frame) is start-up, not steady state; the table's
# `start drop` column counts the frames dropped from launch to the window's start. From the two scrapes' differences, per
# stream: frames a second (its camera stage's frames), dropped (the numbers it skipped: behind or
# lost), and the latency p50/p99 from a frame's arrival to the end of its sink's work, estimated
# from the histogram buckets' differences by interpolating linearly inside the bucket as
# Prometheus's histogram_quantile does (so a figure is as fine as the buckets: ..., 5, 10, 25,
# 50, 100 ms, ...). Prints per N: the slowest stream's frames a second, whether every stream
# kept its rate (>= 95 % of RATE, none dropped), the frames dropped in all, the decoder use
# (nvidia-smi, cuda domain), the host's CPU and the server's CPU (100 %: one core), those three
# over the steady window only, the worst stream's p50 and p99, and start-up: seconds from the
# run's launch until the slowest stream's first frame (planning with a DESCRIBE per camera,
# every stage's process, CUDA context and decoder, PLAY, the first key frame; within 0.2 s, the
# metrics' sampling). PER_STREAM=1 also prints each stream's line.
#
# PROBE=1 (the file server only) separates the server from the pipeline: while the pipeline
# runs, scripts/rtsp-probe.py PLAYs N more streams from the same server (one plain client
# thread, no decoding) over the same window and prints, under the row, the server's own worst
# lateness (each frame's arrival against its RTP time, less the least of it) and the moments
# several of its streams were late at once. A stall the pipeline shows and the probe does not is
# the pipeline's. (The server then sends 2N streams: its CPU column counts both.) Runs from a bundle made by
# scripts/gpu-check.sh (bin/gpuipc-host, its rtsp-file-server.py and
# video/rtsp/h264-1080p.h264) or from a checkout:
#
#   bench-rtsp.sh                         N = 1 4 16 32, 30 frames/s, cuda, the bundle's 1080p stream
#   COUNTS="1 2" DEVICE=cpu SIZE=320x240 SECONDS_EACH=3 scripts/bench-rtsp.sh       smoke test
#   RTSP_URL=rtsp://server:8554 bench-rtsp.sh     an external server serving /cam0, /cam1, ...
#
# The streams come from rtsp-file-server.py (Python's standard library only: no GStreamer, no
# encoder, so the host CPU is the pipeline's and the server's sending), serving STREAM (an H.264
# or HEVC elementary stream without B-frames) looped at RATE on /cam0 .. /camN-1. STREAM
# defaults to the bundle's video/rtsp/h264-1080p.h264; in a checkout without it, one is made
# with ffmpeg (SIZE, 1920x1080 by default, 8 Mb/s). SERVER=gst serves GStreamer's encoded test
# patterns instead (scripts/rtsp-test-server.py, checkout only). The host: $GPUIPC_HOST, else the
# bundle's bin/gpuipc-host, else target/release/gpuipc-host, else target/debug/gpuipc-host.
# START_TIMEOUT (120 s) bounds the wait for every stream's first frame.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
if [ -x "$here/bin/gpuipc-host" ]; then
    root=$here
    server_script=$here/rtsp-file-server.py
    probe_script=$here/rtsp-probe.py
else
    root=$(cd .. && pwd)
    server_script=$root/scripts/rtsp-file-server.py
    probe_script=$root/scripts/rtsp-probe.py
fi
COUNTS=${COUNTS:-"1 4 16 32"}
SIZE=${SIZE:-1920x1080}
RATE=${RATE:-30}
DEVICE=${DEVICE:-cuda}
SECONDS_EACH=${SECONDS_EACH:-20}
SETTLE=${SETTLE:-5}
PROBE=${PROBE:-0}
SERVER=${SERVER:-file}
START_TIMEOUT=${START_TIMEOUT:-120}
HOST=${GPUIPC_HOST:-}
if [ -z "$HOST" ]; then
    for h in "$root/bin/gpuipc-host" "$root/target/release/gpuipc-host" "$root/target/debug/gpuipc-host"; do
        [ -x "$h" ] && HOST=$h && break
    done
fi
[ -x "${HOST:-}" ] || { echo "bench-rtsp: no gpuipc-host (build it, or set GPUIPC_HOST)" >&2; exit 2; }
work=$(mktemp -d)
server=""
run=""
cleanup() {
    if [ -n "$run" ]; then kill "$run" 2>/dev/null; wait "$run" 2>/dev/null || true; fi
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

STREAM=${STREAM:-}
if [ -z "${RTSP_URL:-}" ] && [ "$SERVER" = file ] && [ -z "$STREAM" ]; then
    STREAM=$root/video/rtsp/h264-1080p.h264
    if [ ! -e "$STREAM" ]; then
        command -v ffmpeg >/dev/null || { echo "bench-rtsp: no $STREAM and no ffmpeg to make one: give STREAM" >&2; exit 2; }
        STREAM=$work/stream.h264
        ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "testsrc2=size=$SIZE:rate=$RATE" \
            -frames:v $((RATE * 10)) -c:v libx264 -preset veryfast -bf 0 -g "$RATE" -b:v 8M -pix_fmt yuv420p \
            -f h264 "$STREAM"
    fi
fi
# The stream's size, for the table.
if [ -n "$STREAM" ] && command -v ffprobe >/dev/null; then
    SIZE=$(ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=s=x:p=0 "$STREAM")
fi

printf '%4s %-10s %8s %9s %9s %9s %8s %9s %8s %8s %8s %10s\n' N size "min fps" "all kept" dropped "dec %" "cpu %" "server %" "p50 ms" "p99 ms" "start s" "start drop"
for n in $COUNTS; do
    base=${RTSP_URL:-}
    if [ -z "$base" ]; then
        if [ "$SERVER" = gst ]; then
            "${GPUIPC_RTSP_PYTHON:-/usr/bin/python3}" "$root/scripts/rtsp-test-server.py" --port 0 --mounts "$n" \
                --size "$SIZE" --rate "$RATE" >"$work/server.out" 2>"$work/server.err" &
        else
            python3 "$server_script" "$STREAM" --port 0 --mounts "$n" --rate "$RATE" >"$work/server.out" 2>"$work/server.err" &
        fi
        server=$!
        for _ in $(seq 100); do grep -q '^port ' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
        port=$(awk '/^port /{print $2}' "$work/server.out")
        [ -n "$port" ] || { echo "bench-rtsp: the RTSP server did not start: $(cat "$work/server.err")" >&2; exit 1; }
        base="rtsp://127.0.0.1:$port"
    fi
    # No `frames`: the run goes on until it is stopped after the second scrape.
    {
        printf '[pipeline]\nname = "rtsp-%s"\ndevice = "%s"\n' "$n" "$DEVICE"
        for ((k = 0; k < n; k++)); do
            printf '\n[[stage]]\nname = "cam%s"\nplugin = "rtsp"\nparams = { url = "%s/cam%s" }\n' "$k" "$base" "$k"
            printf '\n[[stage]]\nname = "sink%s"\nplugin = "null"\ninputs = ["cam%s"]\n' "$k" "$k"
        done
    } >"$work/p.toml"
    launched=$(date +%s.%N)
    "$HOST" run "$work/p.toml" --quiet --metrics 127.0.0.1:0 --report "$work/report.json" >"$work/run.out" 2>"$work/run.err" &
    run=$!
    measured=0
    python3 - "$work/run.err" "$run" "${server:-0}" "$n" "$SIZE" "$RATE" "$SECONDS_EACH" "$DEVICE" "$launched" \
        "$START_TIMEOUT" "${PER_STREAM:-0}" "$SETTLE" "$PROBE" "$base" "${probe_script:-}" <<'PY' || measured=$?
import os, re, subprocess, sys, time, urllib.request

err, run, server, n, size, rate, seconds, device, launched, start_timeout, per_stream, settle, probe, base, \
    probe_script = sys.argv[1:17]
settle = float(settle)
run, server, n, rate, seconds = int(run), int(server), int(n), float(rate), float(seconds)
launched, start_timeout = float(launched), float(start_timeout)
hz = os.sysconf("SC_CLK_TCK")

def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False

def give_up(why):
    print(f"bench-rtsp: N={n}: {why}", file=sys.stderr)
    sys.exit(1)

# The endpoint: the run logs where it listens.
deadline = time.monotonic() + start_timeout
url = None
while url is None:
    m = re.search(r"metrics on (http://\S+/metrics)", open(err).read())
    if m:
        url = m.group(1)
    elif not alive(run) or time.monotonic() > deadline:
        give_up("the run serves no metrics")
    else:
        time.sleep(0.1)

SERIES = re.compile(r'^(\w+)\{([^}]*)\} (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

def scrape():
    """{(name, stage, le): value} for the stage series, and when it was taken."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    at = time.monotonic()
    out = {}
    for line in text.splitlines():
        m = SERIES.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        if "stage" in labels:
            key = (m.group(1), labels["stage"], labels.get("le"))
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out, at

def frames(s, stage):
    return s.get(("gpuipc_stage_frames_total", stage, None), 0.0)

cams = [f"cam{k}" for k in range(n)]
# Start-up: until every stream has handed on its first frame.
first = {}
while len(first) < n:
    if not alive(run):
        give_up("the run ended before every stream's first frame:\n" + open(err).read()[-2000:])
    if time.monotonic() > deadline:
        give_up(f"{n - len(first)} streams gave no frame in {start_timeout:.0f} s")
    try:
        s, _ = scrape()
    except OSError:
        s = {}
    now = time.time()
    for c in cams:
        if c not in first and frames(s, c) > 0:
            first[c] = now - launched
    time.sleep(0.1)

# The probe's window: SETTLE from now (its warm-up), then SECONDS_EACH, as the pipeline's.
prober = None
if probe == "1":
    if not server or not probe_script:
        give_up("PROBE=1 needs the file server (not RTSP_URL or SERVER=gst)")
    prober = subprocess.Popen([sys.executable, probe_script, base, str(n), "--seconds", str(seconds),
                               "--warmup", str(settle)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
time.sleep(settle)

def cpu_ticks():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[0] + f[1] + f[2] + f[5] + f[6], sum(f[:7])

def proc_ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError):
        return 0

smi = None
dec_file = err + ".dec"
if device != "cpu":
    try:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.decoder", "--format=csv,noheader,nounits",
                                "-lms", "200"], stdout=open(dec_file, "w"), stderr=subprocess.DEVNULL)
    except OSError:
        smi = None
busy0, all0 = cpu_ticks()
srv0 = proc_ticks(server) if server else 0
s0, t0 = scrape()
time.sleep(seconds)
s1, t1 = scrape()
busy1, all1 = cpu_ticks()
srv1 = proc_ticks(server) if server else 0
if smi is not None:
    smi.terminate()
    smi.wait()
span = t1 - t0

def quantile(q, buckets):
    """histogram_quantile: the bucket holding rank q * count, linear inside it."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return float("nan")
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lower  # the highest finite bound, as Prometheus says
            return lower + (le - lower) * (rank - below) / (cum - below) if cum > below else le
        lower, below = le, cum
    return lower

def latency(stage):
    les = sorted({k[2] for k in s1 if k[0] == "gpuipc_stage_latency_seconds_bucket" and k[1] == stage},
                 key=float)
    name = "gpuipc_stage_latency_seconds_bucket"
    buckets = [(float(le), s1.get((name, stage, le), 0.0) - s0.get((name, stage, le), 0.0)) for le in les]
    return quantile(0.5, buckets) * 1000, quantile(0.99, buckets) * 1000

def dropped_by(s, c):
    return s.get(("gpuipc_stage_dropped_frames_total", c, None), 0.0)

start_dropped = int(sum(dropped_by(s0, c) for c in cams))
rows = []
for k, c in enumerate(cams):
    fps = (frames(s1, c) - frames(s0, c)) / span
    dropped = s1.get(("gpuipc_stage_dropped_frames_total", c, None), 0.0) - \
        s0.get(("gpuipc_stage_dropped_frames_total", c, None), 0.0)
    p50, p99 = latency(f"sink{k}")
    rows.append((c, fps, int(dropped), p50, p99, first[c]))
    if per_stream == "1":
        print(f"     {c:<6s} {fps:8.1f} fps {int(dropped):6d} dropped  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  first frame {first[c]:5.1f} s")
min_fps = min(r[1] for r in rows)
dropped = sum(r[2] for r in rows)
kept = "yes" if dropped == 0 and min_fps >= 0.95 * rate else "no"
p50 = max(r[3] for r in rows)
p99 = max(r[4] for r in rows)
start = max(r[5] for r in rows)
dec = "-"
if os.path.exists(dec_file):
    vals = [float(x) for x in open(dec_file).read().split() if x.replace(".", "", 1).isdigit()]
    if vals:
        dec = f"{sum(vals) / len(vals):.0f}"
cpu = f"{100 * (busy1 - busy0) / (all1 - all0):.0f}" if all1 > all0 else "-"
srv = f"{100 * (srv1 - srv0) / hz / span:.0f}" if server else "-"
print(f"{n:4d} {size:<10s} {min_fps:8.1f} {kept:>9s} {dropped:9d} {dec:>9s} {cpu:>8s} {srv:>9s} {p50:8.1f} {p99:8.1f} {start:8.1f} {start_dropped:10d}")
if prober is not None:
    try:
        out, _ = prober.communicate(timeout=settle + 60)
    except subprocess.TimeoutExpired:
        prober.kill()
        out = "the probe did not finish\n"
    for line in out.splitlines():
        print(f"     {line}")
PY
    # Stop the run (it drains) whatever the measure found, and wait for it.
    kill -INT "$run" 2>/dev/null || true
    status=0
    wait "$run" || status=$?
    run=""
    # KEEP_LOGS=DIR keeps each N's run log (the stages' warnings, e.g. a slow NVDEC decoder).
    if [ -n "${KEEP_LOGS:-}" ]; then mkdir -p "$KEEP_LOGS" && cp "$work/run.err" "$KEEP_LOGS/run-$n.err"; fi
    if [ "$measured" != 0 ] || [ "$status" != 0 ]; then
        echo "bench-rtsp: N=$n failed (run exit $status):" >&2
        tail -20 "$work/run.err" >&2
        exit 1
    fi
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=""; fi
done
