#!/usr/bin/env bash
# The GPU checks, run from a bundle made by scripts/gpu-check.sh on a machine with an NVIDIA
# GPU. Every step prints what it found; the script exits non-zero if any check failed.
#  1. doctor: driver, devices, capabilities, a two-process IPC self-test; the CUDA crate's
#     GPU test and the GPU plugins' tests against the CPU reference; the plan (transport chosen, a missing GPU refused)
#  2. every pipeline in pipelines/ on cuda and on cpu, and on cuda in one process (one context,
#     `run --in-process`): every stage's output checksums equal;
#     with two GPUs, pipelines/multi-gpu/two-gpus.toml (links across GPUs) and
#     replicas-two-gpus.toml (replicas spread over both) against cpu
#  3. a 4K generator -> rgb-process -> yuv420 pipeline for 10,000 frames on the GPU
#  4. SIGKILL of a GPU stage mid-run: the run ends, and GPU memory is returned
#  5. the two-process handoff benchmark
#  6. a GPU fault (illegal address) in one stage, isolation process and mps, with restarts:
#     frames lost, time to recover, GPU memory before and after, outputs = cpu reference
#  7. 20 random SIGKILLs of cuda stages in one run with restarts: produced = delivered +
#     counted, every output frame = the cpu reference for its sequence number
#     (KILL_ROUNDS=N repeats it, KILL_ISOLATIONS="process" picks the isolations)
#  8. two runs at once sharing one MPS daemon (mps = "shared"), a GPU fault in one of them:
#     both finish by their restart policy, outputs = cpu reference, no daemon left after
#  9. replicas of cuda stages (a 3-replica filter feeding a 2-replica one), isolation mps and
#     process: outputs = cpu reference; 20 random SIGKILLs of replicas with restarts; one
#     replica killed without a restart policy, the stage going on with the others
# 10. python stages on the GPU: a PyTorch and a CuPy invert between generator and yuv420 at
#     4K, outputs = cpu reference; the torch stage's speed against the same torch code alone
# 11. stages on two hosts (two agents on this machine, loopback): a 4K and a 1080p cuda chain
#     split a -> b -> a, frames over TCP, then over NCCL (input_transport = "nccl"; libnccl.so.2
#     of the pip wheel nvidia-nccl-cu13, agents with NCCL_HOSTID=a/b); every stage's frames =
#     the cpu reference; then bench-tcp.sh: the TCP bridge (cuda generator and sink) against a
#     plain TCP stream of the same bytes, loopback and a veth pair (BENCH_TCP=0 skips it;
#     its table also in results/bench-tcp.txt)
# 12. video: every clip of the corpus (bundle video/corpus, made by scripts/video-clips.sh)
#     decoded by NVDEC = the cpu decoder's frames (hashes made where the bundle was built, in
#     video/reference), byte for byte; every pipelines/video-*.toml on the GPU = its cpu run;
#     four sources at once; a damaged stream decoded to its end with the damage counted; a
#     decode stage SIGKILLed mid-file and restarted, going on from
#     the next frame; no GPU memory left after
# 15. rtsp: NVDEC on live streams: rtsp-file-server.py (pure Python, no GStreamer) serving the
#     bundle's video/rtsp clips looped at 30 frames/s; the rtsp source's frames decoded by NVDEC
#     = the cpu decoder's (hashes made where the bundle was built), H.264 and HEVC over TCP,
#     H.264 over UDP; the server killed mid-run and started again after an outage longer than
#     the stage's stall timeout: the run finishes, no watchdog kill, numbers rise across the gap,
#     frames after it = the reference too; then bench-rtsp.sh N = 1 4 16 32 at 1080p30
#     (BENCH_RTSP=0 skips it; its table also in results/bench-rtsp.txt; with PROBE=1, the
#     server's own lateness under each row: RTSP_BENCH_PROBE=0 leaves it out). RTSP_DEVICE=cpu runs
#     it in the cpu domain (a check of this section without a GPU).
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=$here/bin/gpuipc-host
results=${OUT:-$here/results}
mkdir -p "$results" "$here/work"
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
# NVRTC comes with the CUDA toolkit of the GPU machine.
for dir in $(ldconfig -p | awk '/libnvrtc.so/ {print $NF}' | xargs -r -n1 dirname) /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if [ -e "$dir/libnvrtc.so.13" ] || [ -e "$dir/libnvrtc.so" ]; then export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
failed=0
fail() { echo "FAIL: $*"; failed=1; }
# How many GPUs this machine has (section 1c and the two-GPU section 2b ask); every section
# writes under work/.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
mkdir -p "$here/work"
# GPU memory in use, MiB, summed over every GPU (nvidia-smi prints a line per GPU).
gpu_memory_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s += $1} END {print s + 0}'; }
section() { echo; echo "== $*"; }
# stamp: each line of stdin with the time it arrived (seconds since the epoch).
stamp() { python3 -u -c 'import sys, time
for line in sys.stdin: sys.stdout.write(f"{time.time():.3f} {line}")'; }
# run_into DIR FILE ARGS...: run FILE from a fresh DIR, every stage's output checksums under
# DIR/sums, its report in DIR/report.json, its output in DIR/run.txt and DIR/err.txt.
run_into() {
    local work=$1 file=$2
    shift 2
    rm -rf "$work" && mkdir -p "$work"
    (cd "$work" && "$host" run "$file" "$@" --quiet --checksums sums --report report.json > run.txt 2> err.txt) ||
        { fail "run $(basename "$work")"; cat "$work/err.txt" "$work/run.txt"; }
}

# GPU_CHECK_SECTIONS="6 7" runs only those sections (1 also runs 1b and 1c; "1b" runs 1b alone); KILL_ROUNDS=N
# repeats section 7's random kills N times for each isolation (a soak of the restart paths).
want() { [ -z "${GPU_CHECK_SECTIONS:-}" ] || [[ " $GPU_CHECK_SECTIONS " == *" $1 "* || " $GPU_CHECK_SECTIONS " == *" ${1%%[a-z]*} "* ]]; }

# compare_taps REF RUN: every line of every tap in RUN equals REF's for its sequence number.
compare_taps() {
    python3 - "$1" "$2" <<'PY'
import os, re, sys
ref, run = sys.argv[1], sys.argv[2]
bad = compared = 0
for name in sorted(os.listdir(run)):
    want = {}
    # A replica's tap (`grade#1.sum`) holds its share of its stage's frames.
    for line in open(os.path.join(ref, re.sub(r"#[0-9]+", "", name))):
        seq, h = line.split()
        want[seq] = h
    for line in open(os.path.join(run, name)):
        seq, h = line.split()
        compared += 1
        if want.get(seq) != h:
            bad += 1
            if bad < 5: print(f"    {name} frame {seq}: {h}, reference {want.get(seq)}")
print(f"    {compared} output frames compared with the cpu reference for their sequence numbers, {bad} differ")
sys.exit(1 if bad else 0)
PY
}

# accounting REPORT SOURCE_TAP SINK_TAP: produced = delivered + dropped + lost, nothing twice.
accounting() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
made = {l.split()[0] for l in open(sys.argv[2])}
got = [l.split()[0] for l in open(sys.argv[3])]
counted = sum(s["dropped"] + s["lost"] for s in report["stages"])
for s in report["stages"]:
    print(f"    {s['name']:8} frames {s['frames']:7} dropped {s['dropped']:5} lost {s['lost']:3} restarts {s['restarts']:3}  {s['outcome']}")
ok = len(made) == len(set(got)) + counted and len(got) == len(set(got))
print(f"    produced {len(made)} = delivered {len(set(got))} + dropped or lost {counted}: {ok}")
# Each link's books from the report's counters alone: produced = delivered + dropped + lost.
for l in report.get("links", []):
    balanced = l["produced"] == l["delivered"] + l["dropped"] + l["lost"]
    print(f"    link {l['link']} at {l['consumer']}: {l['produced']} = {l['delivered']} + {l['dropped']} + {l['lost']}: {balanced}")
    ok = ok and balanced
ok = ok and bool(report.get("links")) and not report.get("warnings")
for w in report.get("warnings", []):
    print(f"    warning: {w}")
sys.exit(0 if ok else 1)
PY
}

# random_kills WORK PROCESS...: SIGKILL a random one of the stage processes named, 20 times at
# random moments, each time waiting until every process restarted runs again (a group may
# restart together); prints the victims. WORK/err.txt is the run's log.
random_kills() {
    local work=$1 kill victim kills=""
    shift
    for kill in $(seq 1 20); do
        sleep "0.$((RANDOM % 300))"
        victim=$(shuf -n1 -e "$@")
        kills="$kills $victim"
        kill -KILL "$(pgrep -f "gpuipc-host __stage $victim" | head -1)" 2>/dev/null
        for _ in $(seq 1 100); do
            [ "$(grep -c "restarting it" "$work/err.txt")" -ge "$kill" ] &&
                [ "$(grep -c " restarted (restart" "$work/err.txt")" -ge "$(grep -o "restarting it\( with [^;]*\)\? in" "$work/err.txt" | awk '{n += 1 + gsub(/'"'"'[^'"'"']*'"'"'/, "")} END {print n}')" ] && break
            sleep 0.05
        done
    done
    echo "$kills"
}

# kill_soak WORK FILE PROCESS...: run FILE (relative to WORK) from a fresh WORK (run.txt,
# err.txt, sums/, report.json), SIGKILL its processes 20 times (random_kills), then stop it
# with SIGTERM; sets `kills` (the victims) and `code` (the run's exit status).
kill_soak() {
    local work=$1 file=$2 hostpid
    shift 2
    rm -rf "$work" && mkdir -p "$work"
    (cd "$work" && exec env GPUIPC_LOG=${KILL_LOG:-info} timeout -k 5 90 "$host" run "$file" --quiet --checksums sums --report report.json > run.txt 2> err.txt) &
    hostpid=$!
    for _ in $(seq 1 300); do grep -q "stages ready; running" "$work/err.txt" 2>/dev/null && break; sleep 0.1; done
    kills=$(random_kills "$work" "$@")
    kill -TERM "$hostpid"; wait "$hostpid"; code=$?
}

fault_pipeline() {  # ISOLATION DEVICE
    printf '%s\n' '[pipeline]' 'name = "gpu-fault"' 'frames = 1500' "isolation = \"$1\"" "device = \"$2\"" \
        'restart = "on-failure"' 'restart_backoff = "10ms"' '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' \
        'params = { width = 1280, height = 720, pattern = "gradient", fps = 1000.0 }' '' \
        '[[stage]]' 'name = "fault"' 'plugin = "test-gpu-fault"' 'inputs = ["gen"]' \
        'params = { mode = "illegal_address", at = 500 }' '' \
        '[[stage]]' 'name = "yuv"' 'plugin = "yuv420"' 'inputs = ["fault"]' '' \
        '[[stage]]' 'name = "sink"' 'plugin = "null"' 'inputs = ["yuv"]'
}

if want 1; then
section "1. doctor"
"$host" doctor || fail "doctor"
fi

if want 1b; then
section "1b. gpu_* tests: gpuipc-cuda on the GPU, plugin kernels against the CPU reference"
for t in tests/*; do
    GPUIPC_REQUIRE_GPU=1 GPUIPC_REQUIRE_NVRTC=1 "$t" gpu_ 2>&1 | grep -E "^test |test result|panicked|assert" | sed "s|^|    $(basename "$t"): |" 
    [ "${PIPESTATUS[0]}" = 0 ] || fail "$(basename "$t") gpu tests"
done
# Paced kernels (docs/gpu.md, "Kernels paced beside the link"): the plugins' kernels with 3
# rows at once, their grid-stride loops covering the rest, against the CPU reference again.
for t in tests/gpuipc-generator tests/gpuipc-rgb-process tests/gpuipc-yuv420 tests/gpuipc-yuv-to-rgb; do
    GPUIPC_KERNEL_ROWS=3 GPUIPC_REQUIRE_GPU=1 GPUIPC_REQUIRE_NVRTC=1 "$t" gpu_ 2>&1 | grep -E "test result|panicked|assert" | sed "s|^|    $(basename "$t") (3 rows at once): |"
    [ "${PIPESTATUS[0]}" = 0 ] || fail "$(basename "$t") gpu tests with 3 rows at once"
done
fi

if want 1c; then
section "1c. the plan on this machine"
"$host" validate "$here/pipelines/4k-yuv.toml" | sed 's/^/    /' || fail "validate 4k-yuv"
sed "s/^device = .*/device = \"cuda:$gpus\"/" "$here/pipelines/4k-yuv.toml" > "$here/work/no-such-gpu.toml"
if [ "$gpus" = 0 ]; then
    fail "nvidia-smi lists no GPU"
elif "$host" validate "$here/work/no-such-gpu.toml" > "$here/work/no-such-gpu.txt" 2>&1; then
    fail "cuda:$gpus on a machine with $gpus GPU(s) was accepted"
else
    head -1 "$here/work/no-such-gpu.txt" | sed 's/^/    /'
    grep -q "device cuda:$gpus requested, but the CUDA driver sees $gpus device" "$here/work/no-such-gpu.txt" ||
        fail "the error for a missing GPU does not say how many there are"
fi
fi

if want 2; then
section "2. every pipeline, cuda against cpu"
for file in pipelines/*.toml; do
    name=$(basename "$file" .toml)
    if grep -q '^# clip:' "$file"; then
        echo "skip   $name: it decodes a clip (section 12)"
        continue
    fi
    if grep -q 'plugin = "encode"' "$file" && ! command -v ffmpeg > /dev/null; then
        echo "skip   $name: its encode sink runs ffmpeg, which this machine does not have"
        continue
    fi
    frames=30
    case $name in 4k*) frames=8 ;; handoff*) frames=1000 ;; esac
    for device in cpu cuda; do
        run_into "$here/work/$name-$device" "$here/$file" --device "$device" --frames "$frames"
    done
    run_into "$here/work/$name-one-context" "$here/$file" --device cuda --frames "$frames" --in-process
    if diff -r "$here/work/$name-cpu" "$here/work/$name-cuda" -x report.json -x run.txt -x err.txt > "$here/work/$name.diff" &&
        diff -r "$here/work/$name-cuda" "$here/work/$name-one-context" -x report.json -x run.txt -x err.txt >> "$here/work/$name.diff"; then
        lines=$(cat "$here/work/$name-cuda"/sums/*.sum | wc -l)
        echo "match  $name: $frames frames, $lines stage outputs compared, cuda = cpu = cuda in one process, byte for byte"
    else
        fail "$name: cuda output differs from cpu or from cuda in one process"
        head -20 "$here/work/$name.diff"
    fi
    grep -E "^(stage|[a-z])" "$here/work/$name-cuda/run.txt" | sed 's/^/    /'
done
fi

if want 2b; then
section "2b. links between two GPUs (pipelines/multi-gpu/two-gpus.toml)"
if [ "$gpus" -lt 2 ]; then
    echo "skipped: $gpus GPU(s) on this machine"
else
    src=$here/pipelines/multi-gpu/two-gpus.toml
    sed 's/"cuda:[0-9]*"/"cpu"/' "$src" > "$here/work/two-gpus-cpu.toml"
    run_into "$here/work/two-gpus-cpu" "$here/work/two-gpus-cpu.toml"
    for variant in mps-auto mps-legacy process-auto process-legacy; do
        isolation=${variant%-*}; transport=${variant#*-}
        sed -e "s/^isolation = .*/isolation = \"$isolation\"/" \
            -e "s/^plugin = \"generator\"/&\ntransport = \"$transport\"/" \
            -e "s/^plugin = \"rgb-process\"/&\ntransport = \"$transport\"/" "$src" > "$here/work/two-gpus-$variant.toml"
        "$host" validate "$here/work/two-gpus-$variant.toml" | sed -n '/^links:/,$p' | sed 's/^/    /'
        run_into "$here/work/two-gpus-$variant" "$here/work/two-gpus-$variant.toml"
        if diff -r "$here/work/two-gpus-cpu/sums" "$here/work/two-gpus-$variant/sums" > /dev/null; then
            echo "match  two-gpus ($variant): $(cat "$here/work/two-gpus-$variant"/sums/*.sum | wc -l) stage outputs, cuda:0/cuda:1 = cpu byte for byte"
        else
            fail "two-gpus ($variant): output differs from cpu"
        fi
        grep -E "^[a-z]" "$here/work/two-gpus-$variant/run.txt" | sed 's/^/    /'
        grep -hE "output ring" "$here/work/two-gpus-$variant/err.txt" | sort | uniq -c | sed 's/^/    /'
    done
    # The rings of links whose consumers are on the other GPU pushed into (at every frame size:
    # by default only from 16 MiB), the other way copied in first (every ring on its producer's GPU).
    for way in push copy; do
        case $way in push) min=0 ;; copy) min=18446744073709551615 ;; esac
        GPUIPC_PEER_PUSH_MIN_BYTES=$min run_into "$here/work/two-gpus-$way" "$here/work/two-gpus-mps-auto.toml"
        if diff -r "$here/work/two-gpus-cpu/sums" "$here/work/two-gpus-$way/sums" > /dev/null; then
            echo "match  two-gpus (mps-auto, rings $way): cuda:0/cuda:1 = cpu byte for byte"
        else
            fail "two-gpus (rings $way): output differs from cpu"
        fi
    done
    GPUIPC_PEER_PUSH_MIN_BYTES=0 "$host" validate "$here/work/two-gpus-mps-auto.toml" | grep -c "pushed into it" | sed 's/^/    links pushed into at every size: /'
    # Every cuda stage's kernels paced to 7 rows at once (by default only beside 4K links).
    GPUIPC_KERNEL_ROWS=7 run_into "$here/work/two-gpus-paced" "$here/work/two-gpus-mps-auto.toml"
    if diff -r "$here/work/two-gpus-cpu/sums" "$here/work/two-gpus-paced/sums" > /dev/null; then
        echo "match  two-gpus (mps-auto, kernels paced to 7 rows at once): cuda:0/cuda:1 = cpu byte for byte"
    else
        fail "two-gpus (kernels paced): output differs from cpu"
    fi
    # The links between the GPUs read in place over peer access instead of copied in first.
    GPUIPC_PEER_PUSH_MIN_BYTES=18446744073709551615 GPUIPC_PEER_COPY_MIN_BYTES=18446744073709551615 \
        run_into "$here/work/two-gpus-read" "$here/work/two-gpus-mps-auto.toml"
    if diff -r "$here/work/two-gpus-cpu/sums" "$here/work/two-gpus-read/sums" > /dev/null; then
        echo "match  two-gpus (mps-auto, read over peer access): cuda:0/cuda:1 = cpu byte for byte"
    else
        fail "two-gpus (read over peer access): output differs from cpu"
    fi
    src=$here/pipelines/multi-gpu/replicas-two-gpus.toml
    sed -E 's/^device = .*/device = "cpu"/' "$src" > "$here/work/replicas-two-gpus-cpu.toml"
    (cd "$here/work" && rm -rf replicas-two-gpus-ref && "$host" run replicas-two-gpus-cpu.toml --in-process --quiet --checksums replicas-two-gpus-ref > /dev/null) ||
        fail "cpu reference of replicas-two-gpus"
    for isolation in mps process; do
        sed -e "s/^isolation = .*/isolation = \"$isolation\"/" "$src" > "$here/work/replicas-two-gpus-$isolation.toml"
        "$host" validate "$here/work/replicas-two-gpus-$isolation.toml" | grep -E "replicas|->" | sed 's/^/    /'
        run_into "$here/work/replicas-two-gpus-$isolation" "$here/work/replicas-two-gpus-$isolation.toml"
        echo "replicas over two GPUs ($isolation):"
        grep -E "^[a-z]" "$here/work/replicas-two-gpus-$isolation/run.txt" | sed 's/^/    /'
        compare_taps "$here/work/replicas-two-gpus-ref" "$here/work/replicas-two-gpus-$isolation/sums" ||
            fail "replicas over two GPUs ($isolation): output differs from cpu"
    done
    echo "4K across GPUs, 5,000 frames (generator on cuda:0 -> rgb-process on cuda:1 -> yuv420 on cuda:0):"
    sed -e 's/^name = "gen"/&\ndevice = "cuda:0"/' -e 's/^name = "grade"/&\ndevice = "cuda:1"/' \
        -e 's/^name = "yuv"/&\ndevice = "cuda:0"/' "$here/pipelines/4k-yuv.toml" > "$here/work/4k-two-gpus.toml"
    "$host" validate "$here/work/4k-two-gpus.toml" | sed -n '/^links:/,$p' | sed 's/^/    /'
    sed -e 's/^name = "gen"/&\ndevice = "cuda:0"/' -e 's/^name = "grade"/&\ndevice = "cuda:0"/' \
        -e 's/^name = "yuv"/&\ndevice = "cuda:0"/' "$here/pipelines/4k-yuv.toml" > "$here/work/4k-one-gpu.toml"
    "$host" validate "$here/work/4k-two-gpus.toml" | grep "^paced kernels" | sed 's/^/    /' ||
        fail "the 4K chain split over two GPUs is not paced"
    for placement in two-gpus one-gpu; do
        (cd "$here/work" && "$host" run "4k-$placement.toml" --frames 5000 > "4k-$placement.txt" 2>&1) || fail "4K on $placement"
        echo "    4K, $placement: $(awk '$1 == "yuv" {print $5 " frames/s"}' "$here/work/4k-$placement.txt")"
        run_into "$here/work/4k-$placement-sums" "$here/work/4k-$placement.toml" --frames 300
    done
    # Split and paced, against one GPU unpaced.
    if diff -r "$here/work/4k-one-gpu-sums/sums" "$here/work/4k-two-gpus-sums/sums" > /dev/null; then
        echo "match  4K split over two GPUs, kernels paced: $(cat "$here/work/4k-two-gpus-sums"/sums/*.sum | wc -l) stage outputs = one GPU's byte for byte"
    else
        fail "4K split over two GPUs: output differs from one GPU's"
    fi
fi
fi

if want 3; then
section "3. 4K generator -> rgb-process -> yuv420, 10,000 frames on the GPU"
(cd "$here/work" && "$host" run "$here/pipelines/4k-yuv.toml" --device cuda --frames 10000 --quiet --report 4k.json) || fail "4K run"
cp "$here/work/4k.json" "$results/" 2>/dev/null
fi

if want 4; then
section "4. SIGKILL of a GPU stage mid-run"
gpu_memory_used > "$here/work/mem-before.txt"
(cd "$here/work" && exec "$host" run "$here/pipelines/4k-yuv.toml" --device cuda --frames 100000000 --quiet > kill.txt 2> kill.err) &
hostpid=$!
for _ in $(seq 1 300); do grep -q "stages ready; running" "$here/work/kill.err" 2>/dev/null && break; sleep 0.1; done
sleep 1
echo "GPU processes while running:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
victim=$(pgrep -f "gpuipc-host __stage grade" | head -1)
echo "killing stage 'grade' (pid $victim) with SIGKILL"
kill -KILL "$victim"
wait "$hostpid"; code=$?
echo "host exit code: $code"; tail -5 "$here/work/kill.txt"
[ "$code" = 1 ] || fail "the run did not fail with exit code 1 after SIGKILL"
grep -q "stage 'grade' killed by SIGKILL" "$here/work/kill.txt" || fail "the report does not name the killed stage"
left=$(pgrep -f "gpuipc-host __stage" || true)
[ -z "$left" ] || fail "stage processes left: $left"
apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)
[ -z "$apps" ] || fail "GPU processes left: $apps"
after=$(gpu_memory_used)
echo "GPU memory used: before $(cat "$here/work/mem-before.txt") MiB, after $after MiB"
[ "$after" -le $(( $(cat "$here/work/mem-before.txt") + 64 )) ] || fail "GPU memory not returned"
fi

if want 5; then
section "5. handoff benchmark (two processes, cpu domain)"
for spin in 20 0; do
    (cd "$here/work" && "$host" run "$here/pipelines/handoff-64.toml" --device cpu --quiet --spin-us "$spin" | grep -E "^sink")
done
fi

if want 6; then
section "6. a GPU fault in one stage (illegal address at frame 500, 1280x720, 1,000 frames/s)"
fault_pipeline process cpu > "$here/work/gpu-fault-cpu.toml"
(cd "$here/work" && rm -rf fault-ref && "$host" run gpu-fault-cpu.toml --in-process --quiet --checksums fault-ref > /dev/null) ||
    fail "cpu reference of the fault pipeline"
for isolation in process mps; do
    work=$here/work/fault-$isolation
    fault_pipeline "$isolation" cuda > "$here/work/gpu-fault-$isolation.toml"
    before=$(gpu_memory_used)
    rm -rf "$work" && mkdir -p "$work"
    started=$(date +%s.%N)
    (cd "$work" && GPUIPC_LOG=debug timeout -k 5 45 "$host" run "../gpu-fault-$isolation.toml" --quiet --checksums sums --report report.json > run.txt 2> err.txt)
    code=$?
    ended=$(date +%s.%N)
    after=$(gpu_memory_used)
    echo "isolation $isolation: exit $code, $(python3 -c "print(f'{$ended - $started:.2f}')") s for 1,500 frames paced at 1,000 frames/s"
    [ "$code" = 0 ] || { fail "gpu fault under $isolation: the run did not finish"; tail -5 "$work/run.txt"; tail -20 "$work/err.txt"; }
    grep -E "illegal address|restarting|restarted|lost with|fatal GPU fault" "$work/err.txt" | sed "s/^/    /" | grep -v "cuEventDestroy\|cuModuleUnload\|cuStreamDestroy" | head -60
    accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "gpu fault under $isolation: frames unaccounted for"
    compare_taps "$here/work/fault-ref" "$work/sums" || fail "gpu fault under $isolation: output differs from cpu"
    echo "    GPU memory used: before $before MiB, after $after MiB"
    [ "$after" -le $((before + 64)) ] || fail "gpu fault under $isolation: GPU memory not returned"
    left=$(pgrep -f "gpuipc-host __stage" || true)
    [ -z "$left" ] || fail "stage processes left: $left"
done
fi

if want 6b; then
section "6b. a GPU fault without a restart policy: the stop, its message, one warning per stage"
# The pipeline of section 6 unpaced, restart = "never": the run must stop soon after the fault
# (every stage gone, GPU memory returned), say under MPS that any stage on the GPU may have
# caused it (the first to report it is not known to be the culprit), name the faulting stage
# under isolation = "process", and log one warning per stage about failed releases, not one
# per CUDA object.
for isolation in process mps; do
    work=$here/work/fault-stop-$isolation
    rm -rf "$work" && mkdir -p "$work"
    fault_pipeline "$isolation" cuda | sed -e 's/^restart = .*/restart = "never"/' -e 's/, fps = 1000.0//' > "$work/p.toml"
    before=$(gpu_memory_used)
    # Each log line stamped as it arrives (the log itself carries no times).
    (cd "$work" && GPUIPC_LOG=debug timeout -k 5 60 "$host" run p.toml --quiet --report report.json > run.txt 2> >(stamp > err.txt))
    code=$?
    ended=$(date +%s.%N)
    sleep 0.2  # the stamping filter's last lines
    after=$(gpu_memory_used)
    cp "$work/err.txt" "$results/fault-stop-$isolation-err.txt"
    python3 - "$work/err.txt" "$ended" "$isolation" <<'PY'
import re, sys, datetime
lines = open(sys.argv[1], errors="replace").read().splitlines()
def at(line):
    m = re.match(r"(\d+\.\d+) ", line)
    return float(m.group(1)) if m else None
fault = next((at(l) for l in lines if "CUDA_ERROR" in l and at(l)), None)
ended = float(sys.argv[2])
print(f"    isolation {sys.argv[3]}: {ended - fault:.2f} s from the first line naming the fault to the host's exit" if fault else "    no fault line with a time found")
for l in lines:
    if "exited" in l or "killed" in l or "aborting" in l:
        t = at(l)
        print(f"      +{t - fault:6.2f} s  {l.split(' ', 1)[1][:160]}" if t and fault else f"      {l[:160]}")
warns = {}
for l in lines:
    if " WARN " in l and ("destroy" in l or "releas" in l or "unregister" in l or "freeing" in l or "current to close" in l):
        m = re.search(r"stage\{name=([^}]+)\}", l) or re.search(r"\[([\w#-]+)\]", l)
        warns[m.group(1) if m else "?"] = warns.get(m.group(1) if m else "?", 0) + 1
print(f"    release warnings per stage: {warns or 'none'}")
PY
    tail -1 "$work/run.txt" | sed 's/^/    /'
    [ "$code" = 1 ] || fail "gpu fault under $isolation without restarts: exit $code, not 1"
    if [ "$isolation" = mps ]; then
        grep -q "under MPS" "$work/run.txt" || fail "gpu fault under mps: the message does not say MPS hides the culprit"
    else
        tail -1 "$work/run.txt" | grep -q "stage 'fault'" || fail "gpu fault under process: the message does not name the faulting stage"
    fi
    echo "    GPU memory used: before $before MiB, after $after MiB"
    [ "$after" -le $((before + 64)) ] || fail "gpu fault under $isolation without restarts: GPU memory not returned"
    left=$(pgrep -f "gpuipc-host __stage" || true)
    [ -z "$left" ] || fail "stage processes left: $left"
done
fi

if want 7; then
section "7. 20 random SIGKILLs of stages on the GPU in one run, with restarts (1280x720 chain)"
for isolation in ${KILL_ISOLATIONS:-mps process}; do
for round in $(seq 1 "${KILL_ROUNDS:-1}"); do
printf '%s\n' '[pipeline]' 'name = "chain"' 'device = "cuda"' "isolation = \"$isolation\"" 'restart = "on-failure"' \
    'restart_backoff = "10ms"' 'restart_window = "2s"' 'max_restarts = 50' 'stall_timeout = "5s"' '' \
    '[[stage]]' 'name = "gen"' 'plugin = "generator"' 'params = { width = 1280, height = 720, pattern = "gradient", fps = 2000.0 }' '' \
    '[[stage]]' 'name = "grade"' 'plugin = "rgb-process"' 'inputs = ["gen"]' 'params = { brightness = 0.1, contrast = 1.2 }' '' \
    '[[stage]]' 'name = "yuv"' 'plugin = "yuv420"' 'inputs = ["grade"]' '' \
    '[[stage]]' 'name = "sink"' 'plugin = "null"' 'inputs = ["yuv"]' > "$here/work/chain.toml"
echo "isolation $isolation, round $round:"
work=$here/work/chain-$isolation
before=$(gpu_memory_used)
kill_soak "$work" ../chain.toml gen grade yuv sink
after=$(gpu_memory_used)
echo "  exit $code; SIGKILL sent to:$kills"
[ "$code" = 0 ] || { fail "the chain ($isolation) did not drain after 20 kills"; tail -5 "$work/run.txt"; tail -20 "$work/err.txt";
    cp "$work/err.txt" "$results/chain-$isolation-$round-err.txt"; }
grep -E "restarted" "$work/err.txt" | sed 's/^/    /' | tail -4
accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "chain ($isolation): frames unaccounted for"
produced=$(cut -d' ' -f1 "$work/sums/gen.sum" | sort -u | wc -l)
sed 's/^device = .*/device = "cpu"/' "$here/work/chain.toml" > "$here/work/chain-cpu.toml"
(cd "$here/work" && rm -rf chain-ref && "$host" run chain-cpu.toml --in-process --quiet --frames "$produced" --checksums chain-ref > /dev/null) ||
    fail "cpu reference of the chain"
compare_taps "$here/work/chain-ref" "$work/sums" || fail "chain ($isolation): output differs from cpu"
echo "    GPU memory used: before $before MiB, after $after MiB"
[ "$after" -le $((before + 64)) ] || fail "chain ($isolation): GPU memory not returned"
done
done
fi

if want 8; then
section "8. two runs sharing one MPS daemon, a GPU fault in one of them"
fault_pipeline process cpu > "$here/work/gpu-fault-cpu.toml"
fault_pipeline mps cuda > "$here/work/shared-a.toml"
fault_pipeline mps cuda | sed -e 's/at = 500/at = 1000000/' -e 's/^frames = 1500/frames = 3000/' > "$here/work/shared-b.toml"
(cd "$here/work" && rm -rf shared-ref && "$host" run gpu-fault-cpu.toml --in-process --quiet --frames 3000 --checksums shared-ref > /dev/null) ||
    fail "cpu reference of the shared runs"
for run in a b; do rm -rf "$here/work/shared-$run" && mkdir -p "$here/work/shared-$run"; done
before=$(gpu_memory_used)
for run in a b; do
    (cd "$here/work/shared-$run" && exec env GPUIPC_LOG=info timeout -k 5 60 "$host" run "../shared-$run.toml" --quiet --checksums sums --report report.json > run.txt 2> err.txt) &
    eval "pid_$run=$!"
done
wait "$pid_a"; code_a=$?
wait "$pid_b"; code_b=$?
after=$(gpu_memory_used)
for run in a b; do
    work=$here/work/shared-$run
    code=$([ "$run" = a ] && echo "$code_a" || echo "$code_b")
    echo "run $run ($([ "$run" = a ] && echo "illegal address at frame 500" || echo "no fault of its own")): exit $code"
    grep -E "MPS daemon|fatal GPU fault|restarted \(" "$work/err.txt" | sed 's/^.*INFO //; s/^.*WARN //; s/^/    /' | head -8
    [ "$code" = 0 ] || { fail "shared MPS, run $run did not finish"; tail -20 "$work/err.txt"; cp "$work/err.txt" "$results/shared-$run-err.txt"; }
    accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "shared MPS, run $run: frames unaccounted for"
    compare_taps "$here/work/shared-ref" "$work/sums" || fail "shared MPS, run $run: output differs from cpu"
done
[ "$(grep -l "joined the MPS daemon" "$here"/work/shared-*/err.txt | wc -l)" = 1 ] || fail "the two runs did not share one MPS daemon"
echo "    GPU memory used: before $before MiB, after $after MiB"
[ "$after" -le $((before + 64)) ] || fail "shared MPS: GPU memory not returned"
left=$(pgrep -u "$(id -u)" -f nvidia-cuda-mps-control || true)
[ -z "$left" ] || fail "an MPS control daemon is left running: $left"
[ ! -e "${TMPDIR:-/tmp}/gpuipc-mps-$(id -u)/current" ] || fail "the shared MPS folder still names a daemon"
fi

if want 9; then
section "9. replicas of cuda stages: a 3-replica filter feeding a 2-replica one (1280x720)"
replica_pipeline() {  # ISOLATION DEVICE RESTART
    printf '%s\n' '[pipeline]' 'name = "replicas"' 'frames = 3000' "isolation = \"$1\"" "device = \"$2\"" \
        "restart = \"$3\"" 'restart_backoff = "10ms"' 'restart_window = "2s"' 'max_restarts = 50' 'stall_timeout = "5s"' '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' 'params = { width = 1280, height = 720, pattern = "gradient", fps = 2000.0 }' '' \
        '[[stage]]' 'name = "grade"' 'plugin = "rgb-process"' 'inputs = ["gen"]' 'replicas = 3' 'params = { brightness = 0.1, contrast = 1.2 }' '' \
        '[[stage]]' 'name = "yuv"' 'plugin = "yuv420"' 'inputs = ["grade"]' 'replicas = 2' '' \
        '[[stage]]' 'name = "sink"' 'plugin = "null"' 'inputs = ["yuv"]'
}
replica_pipeline process cpu never > "$here/work/replicas-cpu.toml"
# replicas_reference SOURCE_TAP: the cpu reference, made again when the run produced more.
replicas_reference() {
    local produced have
    produced=$(cut -d' ' -f1 "$1" | sort -u | wc -l)
    have=$(cat "$here/work/replicas-ref.frames" 2>/dev/null || echo 0)
    [ "$produced" -le "$have" ] && return 0
    (cd "$here/work" && rm -rf replicas-ref && "$host" run replicas-cpu.toml --in-process --quiet --frames "$produced" --checksums replicas-ref > /dev/null) ||
        fail "cpu reference of the replicas"
    echo "$produced" > "$here/work/replicas-ref.frames"
}
rm -f "$here/work/replicas-ref.frames"
"$host" validate "$here/work/replicas-cpu.toml" > /dev/null || fail "validate the replica pipeline"
for isolation in mps process; do
    replica_pipeline "$isolation" cuda never > "$here/work/replicas-$isolation.toml"
    "$host" validate "$here/work/replicas-$isolation.toml" | grep -E "replicas|grade|yuv" | sed 's/^/    /' | head -8
    before=$(gpu_memory_used)
    run_into "$here/work/replicas-$isolation" "../replicas-$isolation.toml"
    after=$(gpu_memory_used)
    work=$here/work/replicas-$isolation
    echo "isolation $isolation: $(grep -E '^sink' "$work/run.txt" | head -1)"
    accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "replicas ($isolation): frames unaccounted for"
    replicas_reference "$work/sums/gen.sum"
    compare_taps "$here/work/replicas-ref" "$work/sums" || fail "replicas ($isolation): output differs from cpu"
    echo "    GPU memory used: before $before MiB, after $after MiB"
    [ "$after" -le $((before + 64)) ] || fail "replicas ($isolation): GPU memory not returned"
done
for isolation in ${KILL_ISOLATIONS:-mps process}; do
for round in $(seq 1 "${KILL_ROUNDS:-1}"); do
    replica_pipeline "$isolation" cuda on-failure | sed 's/^frames = 3000/frames = 1000000/' > "$here/work/replicas-kill.toml"
    work=$here/work/replicas-kill-$isolation
    before=$(gpu_memory_used)
    kill_soak "$work" ../replicas-kill.toml 'grade#0' 'grade#1' 'grade#2' 'yuv#0' 'yuv#1'
    after=$(gpu_memory_used)
    echo "isolation $isolation, round $round: exit $code; SIGKILL sent to:$kills"
    [ "$code" = 0 ] || { fail "replicas ($isolation) did not drain after 20 kills"; tail -5 "$work/run.txt"; tail -20 "$work/err.txt";
        cp "$work/err.txt" "$results/replicas-$isolation-$round-err.txt"; }
    grep -E "restarted \(" "$work/err.txt" | sed 's/^.*INFO //; s/^/    /' | tail -3
    accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "replicas ($isolation): frames unaccounted for after kills"
    replicas_reference "$work/sums/gen.sum"
    compare_taps "$here/work/replicas-ref" "$work/sums" || fail "replicas ($isolation): output differs from cpu after kills"
    echo "    GPU memory used: before $before MiB, after $after MiB"
    [ "$after" -le $((before + 64)) ] || fail "replicas ($isolation): GPU memory not returned after kills"
done
done
replica_pipeline mps cuda never > "$here/work/replicas-gone.toml"
work=$here/work/replicas-gone
rm -rf "$work" && mkdir -p "$work"
(cd "$work" && exec env GPUIPC_LOG=info timeout -k 5 90 "$host" run ../replicas-gone.toml --quiet --checksums sums --report report.json > run.txt 2> err.txt) &
hostpid=$!
for _ in $(seq 1 300); do grep -q "stages ready; running" "$work/err.txt" 2>/dev/null && break; sleep 0.1; done
sleep 0.3
kill -KILL "$(pgrep -f 'gpuipc-host __stage grade#1' | head -1)" 2>/dev/null
wait "$hostpid"; code=$?
echo "one replica killed without a restart policy: exit $code"
grep -E "goes on with" "$work/err.txt" | sed 's/^.*WARN //; s/^/    /'
[ "$code" = 0 ] || { fail "replicas: the stage did not go on without its killed replica"; tail -20 "$work/err.txt"; }
accounting "$work/report.json" "$work/sums/gen.sum" "$work/sums/sink.sum" || fail "replicas (one gone): frames unaccounted for"
replicas_reference "$work/sums/gen.sum"
compare_taps "$here/work/replicas-ref" "$work/sums" || fail "replicas (one gone): output differs from cpu"
fi

if want 10; then
section "10. python stages on the GPU: PyTorch and CuPy between generator and yuv420 (4K)"
python=${GPUIPC_PYTHON:-python3}
"$python" -c "import sys, sysconfig; v = sysconfig.get_config_var; print('   ', sys.version.split()[0], 'shared libpython:', v('Py_ENABLE_SHARED'), v('LIBDIR'), v('INSTSONAME'))"
src=$here/pipelines/python/torch-invert.toml
sed -e 's/^device = "cuda"/device = "cpu"/' -e 's/^plugin = "python"/plugin = "rgb-process"/' \
    -e 's/^params = { script = .*/params = { invert = true }/' "$src" > "$here/work/invert-cpu.toml"
(cd "$here" && rm -rf work/invert-ref && "$host" run work/invert-cpu.toml --in-process --quiet --frames 60 --checksums work/invert-ref > /dev/null) ||
    fail "cpu reference of the invert"
for lib in torch cupy; do
    if ! "$python" -c "import $lib" 2>/dev/null; then
        echo "skipped $lib: \`import $lib\` fails for $python"
        continue
    fi
    sed "s/torch_invert.py/${lib}_invert.py/" "$src" > "$here/work/$lib-invert.toml"
    (cd "$here" && rm -rf "work/$lib-sums" && "$host" run "work/$lib-invert.toml" --quiet --frames 60 --checksums "work/$lib-sums" > "work/$lib-run.txt" 2> "work/$lib-err.txt") ||
        { fail "$lib stage"; tail -30 "$here/work/$lib-err.txt" "$here/work/$lib-run.txt"; continue; }
    echo "$lib between generator and yuv420 (cuda, 4K, 60 frames):"
    compare_taps "$here/work/invert-ref" "$here/work/$lib-sums" || fail "$lib stage: output differs from cpu"
done
if "$python" -c "import torch" 2>/dev/null; then
    # torch on its own default stream: the planes are handed to another stream than the
    # stage's, which the stage orders with its own by events on the GPU (no host wait).
    printf '%s\n' 'import torch' '' 'class Invert:' '    def __init__(self, params, input_formats, output_format, ctx):' '        pass' '' \
        '    def process(self, inputs, output, ctx):' '        for src, dst in zip(inputs[0].planes, output.planes):' \
        '            torch.bitwise_not(torch.from_dlpack(src), out=torch.from_dlpack(dst))' > "$here/work/torch_default_stream.py"
    sed "s|pipelines/python/torch_invert.py|$here/work/torch_default_stream.py|" "$src" > "$here/work/torch-default-invert.toml"
    (cd "$here" && rm -rf work/torch-default-sums && "$host" run work/torch-default-invert.toml --quiet --frames 60 --checksums work/torch-default-sums > work/torch-default-run.txt 2> work/torch-default-err.txt) ||
        { fail "torch stage on torch's default stream"; tail -30 "$here/work/torch-default-err.txt"; }
    echo "torch on its default stream between generator and yuv420 (cuda, 4K, 60 frames):"
    compare_taps "$here/work/invert-ref" "$here/work/torch-default-sums" || fail "torch on its default stream: output differs from cpu"
    printf '%s\n' '[pipeline]' 'name = "torch-speed"' 'device = "cuda"' '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' 'params = { width = 3840, height = 2160, pattern = "gradient" }' '' \
        '[[stage]]' 'name = "invert"' 'plugin = "python"' 'inputs = ["gen"]' \
        'params = { script = "pipelines/python/torch_invert.py", class = "Invert" }' > "$here/work/torch-speed.toml"
    (cd "$here" && "$host" run work/torch-speed.toml --frames 3000 > work/torch-speed.txt 2>&1) || fail "torch speed run"
    echo "    torch stage in the pipeline (generator -> torch, its output in private GPU memory, 4K): $(awk '$1 == "invert" {print $5 " frames/s"}' "$here/work/torch-speed.txt")"
    echo "    $("$python" "$here/pipelines/python/torch_bench.py" 3000)"
fi
fi

if want 11; then
section "11. stages on two hosts: two agents on this machine (loopback), cuda stages, frames over TCP, then over NCCL"
# generator (cuda) on a -> rgb-process (cuda) on b -> yuv420 (cuda) on a: each frame crosses
# to b and back. Over TCP (the default) it is copied to host memory before each link and back
# to the GPU after it; with input_transport = "nccl" it goes GPU to GPU by NCCL (over its
# socket transport here: both ranks are on one machine, told apart by NCCL_HOSTID)
# (docs/multi-host.md). Every stage's frames against the cpu reference in one process.
# SPLIT_DEVICE=cpu runs the TCP half in the cpu domain (a check of this section without a GPU);
# SPLIT_SIZES="W H FRAMES;..." replaces the two chains' sizes and frame counts.
hw=$here/work/hosts
IFS=';' read -r -a split_sizes <<< "${SPLIT_SIZES:-3840 2160 300;1920 1080 1000}"
rm -rf "$hw" && mkdir -p "$hw"
split_device=${SPLIT_DEVICE:-cuda:0}
agent_pids=()
start_agents() {  # ENV=VALUE...: both agents, with that environment (each also gets NCCL_HOSTID=its name)
    agent_pids=()
    for a in "a 17447" "b 17457"; do
        set -- $a
        rm -f "$hw/agent-$1.log"
        env "${agent_env[@]}" NCCL_HOSTID="$1" "$host" agent --name "$1" --listen "tcp/127.0.0.1:$2" > "$hw/agent-$1.log" 2>&1 &
        agent_pids+=($!)
    done
    for _ in $(seq 1 100); do [ "$(cat "$hw"/agent-*.log 2>/dev/null | grep -c listening)" = 2 ] && break; sleep 0.1; done
}
stop_agents() {
    for p in "${agent_pids[@]}"; do kill -TERM "$p"; wait "$p" || fail "an agent did not stop cleanly"; done
    agent_pids=()
}
split_file() {  # W H FRAMES TRANSPORT
    local how=()
    [ "$4" = nccl ] && how=('input_transport = "nccl"')
    printf '%s\n' '[pipeline]' 'name = "split"' "frames = $3" '' \
        '[[host]]' 'name = "a"' 'control = "tcp/127.0.0.1:17447"' '' '[[host]]' 'name = "b"' 'control = "tcp/127.0.0.1:17457"' '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' 'host = "a"' "device = \"$split_device\"" "params = { width = $1, height = $2, pattern = \"noise\", seed = 5 }" '' \
        '[[stage]]' 'name = "grade"' 'plugin = "rgb-process"' 'host = "b"' "device = \"$split_device\"" 'inputs = ["gen"]' "${how[@]}" 'params = { brightness = 0.2, contrast = 1.1 }' '' \
        '[[stage]]' 'name = "yuv"' 'plugin = "yuv420"' 'host = "a"' "device = \"$split_device\"" 'inputs = ["grade"]' "${how[@]}"
}
split_check() {  # TRANSPORT: the 4K and the 1080p chain, every stage against the cpu reference
    local transport=$1 size bad compared sum stage
    for size in "${split_sizes[@]}"; do
        set -- $size
        local tag=$transport-$1
        split_file "$1" "$2" "$3" "$transport" > "$hw/split-$tag.toml"
        grep -v -e '^host = ' -e '^control = ' -e '^input_transport = ' "$hw/split-$tag.toml" |
            sed -e '/^\[\[host\]\]/d' -e '/^name = "[ab]"$/d' -e "s/$split_device/cpu/" > "$hw/ref-$tag.toml"
        (cd "$hw" && "$host" run "split-$tag.toml" --checksums "sums-$tag" --report "report-$tag.json" > "run-$tag.txt" 2> "err-$tag.txt") ||
            { fail "split run $1x$2 over $transport"; tail -20 "$hw/err-$tag.txt" "$hw/run-$tag.txt"; continue; }
        (cd "$hw" && "$host" run "ref-$tag.toml" --in-process --quiet --checksums "ref-$tag" > /dev/null 2> "ref-err-$tag.txt") ||
            { fail "reference $1x$2"; continue; }
        bad=0 compared=0
        for sum in "$hw/sums-$tag"/*/*.sum; do
            stage=$(basename "$sum")
            [ -e "$hw/ref-$tag/$stage" ] || continue  # a bridge's sender: it makes no frames
            compared=$(( compared + $(wc -l < "$sum") ))
            cmp -s "$sum" "$hw/ref-$tag/$stage" || { bad=1; fail "split $1x$2 over $transport: $(basename "$(dirname "$sum")")/$stage differs from the cpu reference"; }
        done
        [ "$compared" -gt 0 ] || { bad=1; fail "split $1x$2 over $transport: no stage output to compare"; }
        [ "$bad" = 0 ] && echo "match  split $1x$2 over $transport: $compared stage outputs on both hosts = the cpu reference in one process, byte for byte"
        # The rows of the final table: frames/s of every stage, by host.
        grep -E "^(host|[ab] )" "$hw/run-$tag.txt" | sed 's/^/    /'
    done
}
agent_env=()
start_agents
split_check tcp
stop_agents

# NCCL: the pip wheel nvidia-nccl-cu13 ships libnccl.so.2 in site-packages/nvidia/nccl/lib.
nccl_dir=$(python3 -c 'import nvidia.nccl as n, os; print(os.path.join(os.path.dirname(n.__file__) if getattr(n, "__file__", None) else list(n.__path__)[0], "lib"))' 2>/dev/null)
if [ -z "$nccl_dir" ] || [ ! -e "$nccl_dir/libnccl.so.2" ]; then
    nccl_dir=$(find / -xdev -name 'libnccl.so.2*' -print -quit 2>/dev/null | xargs -r dirname)
fi
if [ "$split_device" = cpu ]; then
    echo "skipped the NCCL half: SPLIT_DEVICE=cpu (nccl needs both ends on a GPU)"
elif [ -z "$nccl_dir" ]; then
    fail "nccl: no libnccl.so.2 on this machine (pip install nvidia-nccl-cu13)"
else
    echo "NCCL from $nccl_dir; agents with NCCL_HOSTID=a and b, NCCL_NVLS_ENABLE=0"
    agent_env=(LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0)
    start_agents
    split_check nccl
    stop_agents
    for h in a b; do grep -h "NCCL rank" "$hw/agent-$h.log" | head -2 | sed "s/^/    agent $h: /"; done
fi
# The TCP bridge against a plain TCP stream on the same paths (docs/benchmarks.md): a
# measurement, not a check; it fails nothing.
if [ "${BENCH_TCP:-1}" != 0 ] && [ -x "$here/bench-tcp.sh" ]; then
    echo "bench-tcp.sh (frames/s of the bridge against the plain stream):"
    DEVICE=$split_device "$here/bench-tcp.sh" "$here/bin" 2>&1 | grep -v "^ WARN" | tee "$results/bench-tcp.txt" | sed 's/^/    /'
fi
fi

if want 12; then
section "12. video: NVDEC against the cpu decoder, several sources, a decoder killed mid-file"
vw=$here/work/video
mkdir -p "$vw"
# What this GPU's NVDEC decodes (cuvidGetDecoderCaps, 4:2:0), asked directly of the driver.
python3 - <<'PY'
import ctypes
cuda, cuvid = ctypes.CDLL("libcuda.so.1"), ctypes.CDLL("libnvcuvid.so.1")
assert cuda.cuInit(0) == 0
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
for name, codec in [("H.264", 4), ("HEVC", 8), ("VP9", 10), ("AV1", 11)]:
    for depth in (8, 10):
        caps = (ctypes.c_ubyte * 88)()
        ctypes.c_int.from_buffer(caps, 0).value, ctypes.c_int.from_buffer(caps, 4).value = codec, 1
        ctypes.c_uint.from_buffer(caps, 8).value = depth - 8
        rc = cuvid.cuvidGetDecoderCaps(caps)
        ok, w, h = caps[24], ctypes.c_uint.from_buffer(caps, 28).value, ctypes.c_uint.from_buffer(caps, 32).value
        print(f"    NVDEC {name:5} {depth:2}-bit 4:2:0: " + (f"error {rc}" if rc else ("up to %dx%d" % (w, h) if ok else "not supported")))
PY
for clip in "$here"/video/corpus/*; do
    name=$(basename "$clip")
    bash "$here/video-pipeline.sh" "$clip" > "$vw/$name.toml"
    rm -rf "$vw/$name" && mkdir -p "$vw/$name"
    (cd "$vw/$name" && "$host" run "$vw/$name.toml" --device cuda --quiet --checksums sums --report report.json > run.txt 2> err.txt)
    if grep -q "NVDEC cannot decode" "$vw/$name/run.txt"; then
        echo "skip   $name: $(grep -o "this GPU's NVDEC cannot decode[^;]*" "$vw/$name/run.txt" | head -1) (refused when the stage started, as it should be)"
        continue
    fi
    if cmp -s "$vw/$name/sums/decode0.sum" "$here/video/reference/$name.sum"; then
        echo "match  $name: $(wc -l < "$vw/$name/sums/decode0.sum") frames, NVDEC = cpu decoder, byte for byte"
    else
        fail "$name: NVDEC's frames differ from the cpu decoder's"
        diff "$here/video/reference/$name.sum" "$vw/$name/sums/decode0.sum" | head -6
        tail -5 "$vw/$name/run.txt" "$vw/$name/err.txt"
    fi
    grep -h -- "$name: " "$vw/$name/err.txt" | head -1 | sed "s/^/    /"
done
# Every pipelines/video-*.toml on the GPU, with its clip, against its cpu run (60 frames).
for d in "$here"/video/pipelines/*/; do
    name=$(basename "$d")
    rm -rf "$vw/$name" && mkdir -p "$vw/$name" && cp "$d"/clips/* "$vw/$name/"
    (cd "$vw/$name" && "$host" run "$here/pipelines/$name.toml" --device cuda --frames 60 --quiet --checksums sums --report report.json > run.txt 2> err.txt) ||
        { fail "$name on cuda"; cat "$vw/$name/err.txt"; }
    compare_taps "$d/reference" "$vw/$name/sums" || fail "$name: cuda differs from cpu"
    grep -E "^(stage|[a-z])" "$vw/$name/run.txt" | sed 's/^/    /'
done
# Four sources at once, each against its reference.
c=$here/video/corpus
bash "$here/video-pipeline.sh" "$c/h264-bframes.mp4" "$c/hevc-10bit.mp4" "$c/h264-annexb.h264" "$c/vp9.mp4" > "$vw/four.toml"
run_into "$vw/four" "$vw/four.toml" --device cuda
i=0
for name in h264-bframes.mp4 hevc-10bit.mp4 h264-annexb.h264 vp9.mp4; do
    cmp -s "$vw/four/sums/decode$i.sum" "$here/video/reference/$name.sum" || fail "four sources at once: decode$i ($name) differs"
    i=$((i + 1))
done
echo "four sources at once: $(cat "$vw/four"/sums/decode*.sum | wc -l) frames compared"
# A damaged stream (64 bytes overwritten mid-stream): decoded to the end, damage counted.
bash "$here/video-pipeline.sh" "$here/video/damaged/damaged.h264" > "$vw/damaged.toml"
run_into "$vw/damaged" "$vw/damaged.toml" --device cuda
python3 - "$vw/damaged/report.json" <<'PY' || fail "the damaged stream on NVDEC"
import json, sys
s = {s["name"]: s for s in json.load(open(sys.argv[1]))["stages"]}["decode0"]
print(f"    damaged stream: {s['frames']} frames decoded, {s['damaged']} of them damaged, {s['outcome']}")
sys.exit(0 if s["frames"] > 0 and s["damaged"] > 0 else 1)
PY
# A decoder SIGKILLed mid-file (paced at the clip's 30 frames/s), restarted.
before=$(gpu_memory_used)
EXTRA=', realtime = true' STAGE_KEYS='restart = "on-failure"' bash "$here/video-pipeline.sh" "$c/long.mp4" > "$vw/restart.toml"
rm -rf "$vw/restart" && mkdir -p "$vw/restart"
(cd "$vw/restart" && exec "$host" run "$vw/restart.toml" --device cuda --quiet --checksums sums --report report.json > run.txt 2> err.txt) &
hostpid=$!
for _ in $(seq 1 300); do [ "$(cat "$vw/restart/sums/decode0.sum" 2>/dev/null | wc -l)" -ge 90 ] && break; sleep 0.1; done
victim=$(pgrep -f "gpuipc-host __stage decode0" | head -1)
echo "killing 'decode0' (pid $victim) after $(wc -l < "$vw/restart/sums/decode0.sum") frames"
kill -KILL "$victim"
wait "$hostpid" || fail "the restart run failed"
python3 - "$vw/restart/sums/decode0.sum" "$here/video/reference/long.mp4.sum" "$vw/restart/report.json" <<'PY' || fail "the restarted decoder's frames"
import json, sys
got = [l.split() for l in open(sys.argv[1])]
ref = dict(l.split() for l in open(sys.argv[2]))
seqs = [int(s) for s, _ in got]
report = {s["name"]: s for s in json.load(open(sys.argv[3]))["stages"]}
ok = seqs == list(range(len(ref))) and all(ref[s] == h for s, h in got) and report["decode0"]["restarts"] == 1
print(f"    {len(got)} frames made, each once and in order: {seqs == list(range(len(ref)))}; all = cpu reference: {all(ref[s] == h for s, h in got)}; restarts {report['decode0']['restarts']}; lost {report['decode0']['lost'] + report['sink0']['lost']}")
sys.exit(0 if ok else 1)
PY
after=$(gpu_memory_used)
echo "GPU memory used: before $before MiB, after $after MiB"
[ "$after" -le $(( before + 64 )) ] || fail "GPU memory not returned after the video runs"
left=$(pgrep -f "gpuipc-host __stage" || true)
[ -z "$left" ] || fail "stage processes left: $left"
fi

if want 13; then
section "13. metrics of a cuda run: scraped while it runs, then against its report"
mw=$here/work/metrics
rm -rf "$mw" && mkdir -p "$mw"
sed 's/^device = "auto"/device = "cuda"/' "$here/pipelines/4k-yuv.toml" > "$mw/4k.toml"
(cd "$mw" && exec "$host" run 4k.toml --frames 60000 --metrics 127.0.0.1:0 --metrics-linger 60s --report report.json > run.txt 2> err.txt) &
hostpid=$!
python3 - "$mw" "$hostpid" <<'PY' || fail "metrics of a cuda run"
import json, os, re, sys, time, urllib.request
work, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
url = None
while url is None and time.monotonic() < deadline:
    m = re.search(r"metrics on (http://\S+)/metrics", open(os.path.join(work, "err.txt")).read())
    url = m and m.group(1)
    time.sleep(0.05)
def get(path):
    try:
        with urllib.request.urlopen(url + path, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
while get("/readyz")[0] != 200 and time.monotonic() < deadline:
    time.sleep(0.05)
status, live = get("/metrics")
def series(text, name):
    return {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines() if l.startswith(name)}
gpu = series(live, "gpuipc_gpu_memory_used_bytes")
lat = series(live, "gpuipc_stage_latency_seconds_count")
print(f"    while running: /readyz 200, /metrics {status}; GPU memory {list(gpu.values())} bytes; latency counts {sorted(lat.values())}")
ok = status == 200 and gpu and all(v > 0 for v in gpu.values()) and len(lat) == 3 and all(v > 0 for v in lat.values())
while not os.path.exists(os.path.join(work, "report.json")) and time.monotonic() < deadline + 120:
    time.sleep(0.1)
time.sleep(0.5)
_, final = get("/metrics")
report = {s["name"]: s for s in json.load(open(os.path.join(work, "report.json")))["stages"]}
frames = {re.search(r'stage="([^"]+)"', k).group(1): v for k, v in series(final, "gpuipc_stage_frames_total").items()}
agree = all(frames.get(n) == s["frames"] for n, s in report.items())
p99 = {n: (s.get("latency") or {}).get("p99_ms") for n, s in report.items()}
print(f"    after: frames {frames} = report {agree}; latency p99 by stage {p99}")
os.kill(pid, 15)
sys.exit(0 if ok and agree else 1)
PY
wait "$hostpid" || true
fi

if want 14; then
section "14. NVTX: every cuda stage's range for every frame, seen by a tool attached as Nsight Systems attaches"
# The recorder (plugin-api/cuda/nvtx-recorder) is loaded by NVTX from NVTX_INJECTION64_PATH, as
# nsys's injection library is, and writes each stage process's ranges to nw/record.
nw=$here/work/nvtx
rm -rf "$nw" && mkdir -p "$nw/record"
sed 's/^device = "auto"/device = "cuda"/' "$here/pipelines/4k-yuv.toml" > "$nw/4k.toml"
nvtx_frames=2000
if ! (cd "$nw" && GPUIPC_NVTX=1 NVTX_INJECTION64_PATH="$here/bin/libnvtx_recorder.so" GPUIPC_NVTX_RECORD="$nw/record" \
    "$host" run 4k.toml --frames "$nvtx_frames" > run.txt 2> err.txt); then
    fail "nvtx: the run"; tail -5 "$nw/err.txt"
elif grep -q "NVTX cannot be loaded" "$nw/err.txt"; then
    fail "nvtx: $(grep -m1 'NVTX cannot be loaded' "$nw/err.txt")"
else
    python3 - "$nw/record" "$nvtx_frames" <<'PY' || fail "nvtx: ranges"
import os, re, sys
record, frames = sys.argv[1], int(sys.argv[2])
seen = {}
for name in sorted(os.listdir(record)):
    lines = open(os.path.join(record, name)).read().splitlines()
    threads = {l.split(" ", 2)[1]: l.split(" ", 2)[2] for l in lines if l.startswith("thread ")}
    depth, pushes, bad = {}, [], 0
    for l in lines:
        kind, tid, *rest = l.split(" ", 2)
        if kind == "push":
            depth[tid] = depth.get(tid, 0) + 1
            pushes.append((tid, rest[0]))
        elif kind == "pop":
            depth[tid] = depth.get(tid, 0) - 1
            bad += depth[tid] < 0
    for tid, text in pushes:
        m = re.fullmatch(r"(\S+) frame (\d+)", text)
        stage = threads.get(tid, "").removeprefix("gpuipc stage ")
        if not m or m.group(1) != stage:
            bad += 1
            continue
        seen.setdefault(stage, []).append(int(m.group(2)))
    open_ranges = sum(v for v in depth.values() if v > 0)
    print(f"    {name}: threads {sorted(threads.values())}, {len(pushes)} ranges, {open_ranges} left open, {bad} wrong")
    if bad:
        sys.exit(1)
ok = sorted(seen) == ["gen", "grade", "yuv"] and all(sorted(v) == list(range(frames)) for v in seen.values())
print(f"    stages {sorted(seen)}: each frame 0..{frames - 1} once: {ok}")
sys.exit(0 if ok else 1)
PY
    # What the ranges cost: NVTX off, and on with no tool attached, side by side.
    for round in 1 2; do
        for nvtx in 0 1; do
            (cd "$nw" && GPUIPC_NVTX=$nvtx "$host" run 4k.toml --frames 20000 > "off-on-$nvtx-$round.txt" 2>&1) || fail "nvtx: run GPUIPC_NVTX=$nvtx"
            echo "    GPUIPC_NVTX=$nvtx, no tool, round $round: yuv $(awk '$1 == "yuv" {print $5}' "$nw/off-on-$nvtx-$round.txt") frames/s"
        done
    done
fi
fi

if want 15; then
section "15. rtsp: NVDEC on live streams"
rdev=${RTSP_DEVICE:-cuda}
rw=$here/work/rtsp
rclips=$here/video/rtsp
if [ "$rdev" = cuda ] && [ "$gpus" = 0 ]; then
    echo "skip   no GPU here (RTSP_DEVICE=cpu runs this section in the cpu domain)"
elif [ ! -e "$rclips/h264.h264" ] || [ ! -e "$here/rtsp-file-server.py" ]; then
    fail "the bundle has no video/rtsp clips or rtsp-file-server.py (scripts/gpu-check.sh makes them)"
else
rm -rf "$rw" && mkdir -p "$rw"
# rtsp_server CLIP OUT [ARGS...]: start the server on CLIP (its lines in OUT); sets rtsp_pid
# and rtsp_port (empty if it did not start in 10 s).
rtsp_server() {
    local clip=$1 out=$2
    shift 2
    python3 "$here/rtsp-file-server.py" "$clip" "$@" > "$out" 2> "$out.err" &
    rtsp_pid=$!
    rtsp_port=""
    for _ in $(seq 1 100); do
        rtsp_port=$(awk '/^port /{print $2}' "$out" 2>/dev/null)
        [ -n "$rtsp_port" ] && break
        sleep 0.1
    done
    [ -n "$rtsp_port" ] || fail "the RTSP server did not start on $(basename "$clip"): $(cat "$out.err")"
}
rtsp_stop() { kill "$rtsp_pid" 2>/dev/null; wait "$rtsp_pid" 2>/dev/null; }
# frames_in SUM: the frames a checksum file holds so far (0 before it exists).
frames_in() { local n; n=$(grep -vc "^#" "$1" 2>/dev/null); echo "${n:-0}"; }
# camera_toml URL FRAMES PARAMS STAGE-KEY: an rtsp camera into a null sink.
camera_toml() {
    printf '%s\n' '[pipeline]' 'name = "rtsp-check"' "frames = $2" "device = \"$rdev\"" '' \
        '[[stage]]' 'name = "cam"' 'plugin = "rtsp"' "$4" "params = { url = \"$1\"$3 }" '' \
        '[[stage]]' 'name = "sink"' 'plugin = "null"' 'inputs = ["cam"]'
}
# rtsp_compare SUM REFERENCE REPORT MODE: the camera's frames against the cpu decoder's frames of
# the clip, which the server loops from its first frame for each connection. MODE `loop`: frame
# `seq` is the clip's frame seq % n (none may be missing). MODE `gap`: a connection broke once;
# before the gap as for `loop`, after it the j-th frame is the clip's j % n (the new connection
# starts the clip again); numbers rise, skip the frames lost, and the report counts them dropped.
rtsp_compare() {
    python3 - "$@" <<'PY'
import json, sys
sums, ref, report, mode = sys.argv[1:5]
got = [(int(s), h) for s, h in (l.split() for l in open(sums) if not l.startswith("#"))]
want = [h for _, h in sorted((int(s), h) for s, h in (l.split() for l in open(ref)))]
n = len(want)
cam = {s["name"]: s for s in json.load(open(report))["stages"]}["cam"]
seqs = [s for s, _ in got]
rising = all(a < b for a, b in zip(seqs, seqs[1:]))
gaps = [i + 1 for i, (a, b) in enumerate(zip(seqs, seqs[1:])) if b > a + 1]
bad = 0
for i, (seq, h) in enumerate(got):
    j = seq if mode == "loop" or not gaps or i < gaps[0] else i - gaps[0]
    if h != want[j % n]:
        bad += 1
        if bad <= 3: print(f"    frame {seq}: {h}, the cpu decoder's {want[j % n]}")
ok = rising and bad == 0 and got
if mode == "loop":
    ok = ok and seqs == list(range(len(seqs)))
    print(f"    {len(got)} frames ({n} in the clip, looped), numbered 0..{len(got) - 1} without a gap: {seqs == list(range(len(seqs)))}; {bad} differ from the cpu decoder's")
else:
    after = len(got) - gaps[0] if gaps else 0
    lost = seqs[-1] + 1 - len(got) if got else 0
    ok = ok and len(gaps) == 1 and after > 0 and cam["dropped"] == lost and cam["restarts"] == 0
    print(f"    {len(got)} frames, rising: {rising}; gaps: {len(gaps)} ({lost} numbers skipped, the report's dropped {cam['dropped']}); {after} frames after it; restarts {cam['restarts']}; {bad} differ from the cpu decoder's")
sys.exit(0 if ok else 1)
PY
}
for case in "h264.h264 tcp" "hevc.hevc tcp" "h264.h264 udp"; do
    read -r clip transport <<< "$case"
    name=${clip%%.*}-$transport
    rtsp_server "$rclips/$clip" "$rw/$name.server"
    [ -n "$rtsp_port" ] || continue
    camera_toml "rtsp://127.0.0.1:$rtsp_port/cam0" 90 ", transport = \"$transport\"" "" > "$rw/$name.toml"
    run_into "$rw/$name" "$rw/$name.toml"
    rtsp_stop
    echo "$name: $(grep -h "rtsp://" "$rw/$name/err.txt" | head -1 | sed 's/^.*rtsp:/rtsp:/')"
    rtsp_compare "$rw/$name/sums/cam.sum" "$rclips/reference/$clip.sum" "$rw/$name/report.json" loop ||
        fail "rtsp $name: the frames from the stream differ from the cpu decoder's"
done
# The server killed after 30 frames and started again on its port once the source has tried to
# connect 7 times (waits of 0.2, 0.4, 0.5, 0.5, 0.5, 0.5 s: an outage of over 2.6 s), longer than
# the stage's stall timeout of 2 s.
rtsp_server "$rclips/h264.h264" "$rw/restart.server"
if [ -n "$rtsp_port" ]; then
    port=$rtsp_port
    camera_toml "rtsp://127.0.0.1:$port/cam0" 240 ", reconnect = 0.2, reconnect_max = 0.5" 'stall_timeout = "2s"' > "$rw/restart.toml"
    rm -rf "$rw/restart" && mkdir -p "$rw/restart"
    (cd "$rw/restart" && exec timeout -k 5 120 "$host" run "$rw/restart.toml" --quiet --checksums sums --report report.json > run.txt 2> err.txt) &
    hostpid=$!
    for _ in $(seq 1 300); do [ "$(frames_in "$rw/restart/sums/cam.sum")" -ge 30 ] && break; sleep 0.1; done
    echo "killing the RTSP server (pid $rtsp_pid) after $(frames_in "$rw/restart/sums/cam.sum") frames"
    rtsp_stop
    for _ in $(seq 1 300); do [ "$(grep -c "connecting again" "$rw/restart/err.txt" 2>/dev/null)" -ge 7 ] && break; sleep 0.1; done
    echo "    $(grep -c "connecting again" "$rw/restart/err.txt") tries to connect; starting the server again on port $port"
    rtsp_server "$rclips/h264.h264" "$rw/restart.server2" --port "$port"
    wait "$hostpid" || { fail "the run through the server's restart failed"; tail -5 "$rw/restart/run.txt" "$rw/restart/err.txt"; }
    rtsp_stop
    grep -q "connected again" "$rw/restart/err.txt" || fail "the source did not say it connected again"
    if grep -q "watchdog" "$rw/restart/err.txt" "$rw/restart/run.txt"; then
        fail "the watchdog killed the camera stage during the outage"
        grep -h "watchdog" "$rw/restart/err.txt" "$rw/restart/run.txt" | head -3
    fi
    grep -h "lost (connection)" "$rw/restart/err.txt" | head -1 | sed 's/^.*rtsp:/    rtsp:/'
    rtsp_compare "$rw/restart/sums/cam.sum" "$rclips/reference/h264.h264.sum" "$rw/restart/report.json" gap ||
        fail "rtsp: the run across the server's restart"
fi
# The camera gone away in one process (`run --in-process`): the source has no frame and keeps
# trying to connect; SIGINT must still end the run.
rtsp_server "$rclips/h264.h264" "$rw/away.server"
if [ -n "$rtsp_port" ]; then
    camera_toml "rtsp://127.0.0.1:$rtsp_port/cam0" 100000 ", reconnect = 0.2, reconnect_max = 0.5" "" > "$rw/away.toml"
    rm -rf "$rw/away" && mkdir -p "$rw/away"
    (cd "$rw/away" && exec "$host" run "$rw/away.toml" --in-process --checksums sums > run.txt 2> err.txt) &
    awaypid=$!
    for _ in $(seq 1 300); do [ "$(frames_in "$rw/away/sums/cam.sum")" -ge 30 ] && break; sleep 0.1; done
    rtsp_stop
    for _ in $(seq 1 300); do [ "$(grep -c "connecting again" "$rw/away/err.txt" 2>/dev/null)" -ge 3 ] && break; sleep 0.1; done
    got=$(frames_in "$rw/away/sums/cam.sum")
    tries=$(grep -c "connecting again" "$rw/away/err.txt")
    if [ "$got" -lt 30 ] || [ "$tries" -lt 3 ] || ! kill -0 "$awaypid" 2>/dev/null; then
        fail "camera gone, --in-process: the run was not waiting for the camera ($got frames, $tries tries to connect)"
        kill -KILL "$awaypid" 2>/dev/null
        wait "$awaypid"
        tail -3 "$rw/away/run.txt" "$rw/away/err.txt"
    else
        kill -INT "$awaypid"
        for _ in $(seq 1 150); do kill -0 "$awaypid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$awaypid" 2>/dev/null; then
            fail "run --in-process with the camera gone did not end within 15 s of SIGINT"
            kill -KILL "$awaypid"
            wait "$awaypid"
        else
            wait "$awaypid"
            code=$?
            echo "camera gone, --in-process: SIGINT ended the run (exit $code) after $got frames and $tries tries to connect"
            grep -E "^run " "$rw/away/run.txt" | sed 's/^/    /'
            [ "$code" = 0 ] && grep -q "stopped by a stop signal" "$rw/away/run.txt" ||
                fail "camera gone, --in-process: the run did not end as stopped (exit $code)"
        fi
    fi
fi
left=$(pgrep -f "gpuipc-host __stage" || true)
[ -z "$left" ] || fail "stage processes left: $left"
if [ "${BENCH_RTSP:-1}" != 0 ]; then
    echo "bench-rtsp.sh (N rtsp cameras at 1080p30 on this GPU's NVDEC):"
    DEVICE=$rdev SECONDS_EACH=${RTSP_BENCH_SECONDS:-10} PROBE=${RTSP_BENCH_PROBE:-1} bash "$here/bench-rtsp.sh" | tee "$results/bench-rtsp.txt" | sed 's/^/    /' ||
        fail "bench-rtsp.sh"
fi
fi
fi

echo
if [ "$failed" = 0 ]; then echo "ALL GPU CHECKS PASSED"; else echo "SOME GPU CHECKS FAILED"; fi
exit "$failed"
