#!/usr/bin/env bash
# The GPU checks, run from a bundle made by scripts/gpu-check.sh on a machine with an NVIDIA
# GPU. Every step prints what it found; the script exits non-zero if any check failed.
#  1. doctor: driver, devices, capabilities, a two-process IPC self-test; the CUDA crate's
#     GPU test and the GPU plugins' tests against the CPU reference; the plan (transport chosen, a missing GPU refused)
#  2. every pipeline in pipelines/ on cuda and on cpu: every stage's output checksums equal;
#     with two GPUs, pipelines/multi-gpu/two-gpus.toml (links across GPUs) against cpu
#  3. a 4K generator -> rgb-process -> yuv420 pipeline for 10,000 frames on the GPU
#  4. SIGKILL of a GPU stage mid-run: the run ends, and GPU memory is returned
#  5. the two-process handoff benchmark
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=$here/bin/gpuipc-host
results=${OUT:-$here/results}
mkdir -p "$results"
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
# NVRTC comes with the CUDA toolkit of the GPU machine.
for dir in $(ldconfig -p | awk '/libnvrtc.so/ {print $NF}' | xargs -r -n1 dirname) /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if [ -e "$dir/libnvrtc.so.13" ] || [ -e "$dir/libnvrtc.so" ]; then export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
done
failed=0
fail() { echo "FAIL: $*"; failed=1; }
section() { echo; echo "== $*"; }
# run_into DIR FILE ARGS...: run FILE from a fresh DIR, every stage's output checksums under
# DIR/sums, its report in DIR/report.json, its output in DIR/run.txt and DIR/err.txt.
run_into() {
    local work=$1 file=$2
    shift 2
    rm -rf "$work" && mkdir -p "$work"
    (cd "$work" && "$host" run "$file" "$@" --quiet --checksums sums --report report.json > run.txt 2> err.txt) ||
        { fail "run $(basename "$work")"; cat "$work/err.txt" "$work/run.txt"; }
}

section "1. doctor"
"$host" doctor || fail "doctor"

section "1b. gpu_* tests: gpuipc-cuda on the GPU, plugin kernels against the CPU reference"
for t in tests/*; do
    GPUIPC_REQUIRE_GPU=1 GPUIPC_REQUIRE_NVRTC=1 "$t" gpu_ 2>&1 | grep -E "^test |test result|panicked|assert" | sed "s|^|    $(basename "$t"): |" 
    [ "${PIPESTATUS[0]}" = 0 ] || fail "$(basename "$t") gpu tests"
done

section "1c. the plan on this machine"
"$host" validate "$here/pipelines/4k-yuv.toml" | sed 's/^/    /' || fail "validate 4k-yuv"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
mkdir -p "$here/work"
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

section "2. every pipeline, cuda against cpu"
for file in pipelines/*.toml; do
    name=$(basename "$file" .toml)
    frames=30
    case $name in 4k*) frames=8 ;; handoff*) frames=1000 ;; esac
    for device in cpu cuda; do
        run_into "$here/work/$name-$device" "$here/$file" --device "$device" --frames "$frames"
    done
    if diff -r "$here/work/$name-cpu" "$here/work/$name-cuda" -x report.json -x run.txt -x err.txt > "$here/work/$name.diff"; then
        lines=$(cat "$here/work/$name-cuda"/sums/*.sum | wc -l)
        echo "match  $name: $frames frames, $lines stage outputs compared, cuda = cpu byte for byte"
    else
        fail "$name: cuda output differs from cpu"
        head -20 "$here/work/$name.diff"
    fi
    grep -E "^(stage|[a-z])" "$here/work/$name-cuda/run.txt" | sed 's/^/    /'
done

section "2b. links between two GPUs (pipelines/multi-gpu/two-gpus.toml)"
if [ "$gpus" -lt 2 ]; then
    echo "skipped: $gpus GPU(s) on this machine"
else
    src=$here/pipelines/multi-gpu/two-gpus.toml
    sed 's/"cuda:[0-9]*"/"cpu"/' "$src" > "$here/work/two-gpus-cpu.toml"
    run_into "$here/work/two-gpus-cpu" "$here/work/two-gpus-cpu.toml"
    for variant in mps-auto process-auto process-legacy; do
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
    echo "4K across GPUs, 5,000 frames (generator on cuda:0 -> rgb-process on cuda:1 -> yuv420 on cuda:0):"
    sed -e 's/^name = "gen"/&\ndevice = "cuda:0"/' -e 's/^name = "grade"/&\ndevice = "cuda:1"/' \
        -e 's/^name = "yuv"/&\ndevice = "cuda:0"/' "$here/pipelines/4k-yuv.toml" > "$here/work/4k-two-gpus.toml"
    "$host" validate "$here/work/4k-two-gpus.toml" | sed -n '/^links:/,$p' | sed 's/^/    /'
    (cd "$here/work" && "$host" run 4k-two-gpus.toml --frames 5000 --quiet) || fail "4K across two GPUs"
fi

section "3. 4K generator -> rgb-process -> yuv420, 10,000 frames on the GPU"
(cd "$here/work" && "$host" run "$here/pipelines/4k-yuv.toml" --device cuda --frames 10000 --quiet --report 4k.json) || fail "4K run"
cp "$here/work/4k.json" "$results/" 2>/dev/null

section "4. SIGKILL of a GPU stage mid-run"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits > "$here/work/mem-before.txt"
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
after=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
echo "GPU memory used: before $(cat "$here/work/mem-before.txt") MiB, after $after MiB"
[ "$after" -le $(( $(cat "$here/work/mem-before.txt") + 64 )) ] || fail "GPU memory not returned"

section "5. handoff benchmark (two processes, cpu domain)"
for spin in 20 0; do
    (cd "$here/work" && "$host" run "$here/pipelines/handoff-64.toml" --device cpu --quiet --spin-us "$spin" | grep -E "^sink")
done

echo
if [ "$failed" = 0 ]; then echo "ALL GPU CHECKS PASSED"; else echo "SOME GPU CHECKS FAILED"; fi
exit "$failed"
