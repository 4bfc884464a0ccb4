#!/usr/bin/env bash
# Frames across two GPUs against what the link between them carries, in one call on a machine
# with two NVIDIA GPUs (from a bundle of scripts/gpu-check.sh: BUNDLE_DIR/bench-two-gpus.sh
# [FRAMES] [ROUNDS]).
#
# The ceiling is `gpuipc-host doctor`'s: copies of 32 MiB out of the other GPU's memory into
# one's own, each way. The pipeline is pipelines/4k-yuv.toml (generator -> rgb-process ->
# yuv420) split cuda:0 -> cuda:1 -> cuda:0, so each frame crosses the link once each way; its
# GB/s a direction is frames/s times the rgb8 frame's bytes. Each size runs these ways, the
# rounds interleaved:
#
#   push    the default at 4K (frames of 16 MiB and more; GPUIPC_PEER_PUSH_MIN_BYTES=0 at every
#           size): a ring whose consumers are all on the other GPU lives there, and
#           the producer's copy engines push each frame into it from a buffer of its own GPU
#   copy    the ring on its producer's GPU (GPUIPC_PEER_PUSH_MIN_BYTES=18446744073709551615):
#           a consumer on the other GPU copies each frame into its own GPU's memory with the
#           copy engines, beside the stage's kernels (peer_copy_min_bytes = 0)
#   WAY@N   WAY with the pushes or copies on N streams, the ring's slots in turn
#           (GPUIPC_PEER_COPY_LANES=N; the default is 2)
#   copy-spin  copy, the consumer's host waiting for each frame before it enqueues the copy
#           (GPUIPC_READY_SPIN_US=200), so the copy stream never waits on the other process
#   read    the ring on its producer's GPU, the consumer's kernels reading the frames over the
#           link in place (both GPUIPC_PEER_PUSH_MIN_BYTES and GPUIPC_PEER_COPY_MIN_BYTES
#           18446744073709551615)
#   one     the same pipeline on cuda:0 alone, for reference
#   oneway-push, oneway-copy, oneway-read   cuda:0 -> cuda:1 -> cuda:1: the link used one way
#   sink-push, sink-copy, sink-read, sink-one   generator on cuda:0 -> rgb-process on cuda:1
#           (cuda:0 for -one), the last stage: one link, one kernel on the far side
#   duplex-push, duplex-copy   sink-WAY and its mirror (generator on cuda:1 -> rgb-process on
#           cuda:0) in one pipeline: the link used both ways, as by the split chain, with no
#           chain between the directions; the slower chain's frames/s ("yuv" or "yuv2")
#   WAY-dN  WAY with every ring N slots deep (the default is 8 at 4K)
#   WAY+rN  WAY with every cuda stage's row kernels working on at most N rows at once
#           (GPUIPC_KERNEL_ROWS=N; 0: unpaced). By default stages on a GPU that 4K frames cross
#           to or from another GPU are paced at 64 rows, others not (docs/gpu.md, "Kernels
#           paced beside the link")
#
# WAYS="push push+r0 copy copy+r0 read one oneway-push oneway-copy sink-push sink-copy
# sink-read sink-one duplex-push duplex-copy" by default.
#
# SIZES="3840x2160 1920x1080" by default.
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=${GPUIPC_HOST:-$here/bin/gpuipc-host}
results=${OUT:-$here/results}/two-gpus
work=$here/work/two-gpus
mkdir -p "$results" "$work"
frames=${1:-5000}
rounds=${2:-3}
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
. "$here/lib-bench.sh"
find_nvrtc
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1) x $gpus, $(nproc) cores; commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
if [ "$gpus" -lt 2 ]; then
    echo "skipped: $gpus GPU(s) on this machine"
    exit 0
fi
nvidia-smi topo -m 2>/dev/null | head -3 | sed 's/^/    /'
"$host" doctor > "$results/doctor.txt" 2>&1
grep -E "copies out of it" "$results/doctor.txt" | sed 's/^/    doctor: /'
ceiling=$(sed -n 's/.*copies out of it into cuda:[0-9]*.s own memory: \([0-9.]*\) GB\/s.*/\1/p' "$results/doctor.txt" | sort -n | head -1)
echo "ceiling (the slower direction): ${ceiling:-unknown} GB/s"

split() {  # W H WAY: the 4K file resized, its stages placed
    local devices
    case $3 in
        one) devices="0 0 0" ;;
        oneway-*) devices="0 1 1" ;;
        sink-one) devices="0 0" ;;
        sink-*) devices="0 1" ;;
        *) devices="0 1 0" ;;
    esac
    case $3 in
        duplex*)
            printf '[pipeline]\nname = "duplex"\n'
            printf '\n[[stage]]\nname = "%s"\nplugin = "generator"\ndevice = "cuda:%s"\nparams = { width = %s, height = %s, pattern = "bars" }\n\n[[stage]]\nname = "%s"\nplugin = "rgb-process"\nparams = { invert = true }\ndevice = "cuda:%s"\ninputs = ["%s"]\n' \
                gen 0 "$1" "$2" yuv 1 gen gen2 1 "$1" "$2" yuv2 0 gen2
            return
            ;;
        sink-*)
            set -- "$1" "$2" $devices
            printf '[pipeline]\nname = "sink"\n\n[[stage]]\nname = "gen"\nplugin = "generator"\ndevice = "cuda:%s"\nparams = { width = %s, height = %s, pattern = "bars" }\n\n[[stage]]\nname = "yuv"\nplugin = "rgb-process"\nparams = { invert = true }\ndevice = "cuda:%s"\ninputs = ["gen"]\n' "$3" "$1" "$2" "$4"
            return
            ;;
    esac
    local depth=""
    case $3 in
        *-d[0-9]*) depth="\ndepth = ${3##*-d}" ;;
    esac
    set -- "$1" "$2" $devices
    sed -e "s/width = 3840, height = 2160/width = $1, height = $2/" \
        -e "s/^name = \"gen\"/&$depth/" -e "s/^name = \"grade\"/&$depth/" \
        -e "s/^name = \"gen\"/&\ndevice = \"cuda:$3\"/" -e "s/^name = \"grade\"/&\ndevice = \"cuda:$4\"/" \
        -e "s/^name = \"yuv\"/&\ndevice = \"cuda:$5\"/" "$here/pipelines/4k-yuv.toml"
}

printf '%-10s %-16s %6s %12s %14s %12s\n' size way round "frames/s" "GB/s each way" "of ceiling"
for size in ${SIZES:-3840x2160 1920x1080}; do
    w=${size%x*}
    h=${size#*x}
    bytes=$(( (w * 3 + 63) / 64 * 64 * h ))
    for round in $(seq 1 "$rounds"); do
        for way in ${WAYS:-push push+r0 copy copy+r0 read one oneway-push oneway-copy sink-push sink-copy sink-read sink-one duplex-push duplex-copy}; do
            rows_env=()
            base=$way
            case $way in
                *+r*)
                    rows=${way##*+r}
                    if [[ ! $rows =~ ^[0-9]+$ ]]; then
                        echo "way $way: +rN comes last, N a number of rows" >&2
                        exit 2
                    fi
                    rows_env=(GPUIPC_KERNEL_ROWS="$rows")
                    base=${way%+r*}
                    ;;
            esac
            lanes=$base
            base=${base%@*}
            file=$work/$way-$size.toml
            split "$w" "$h" "$base" > "$file"
            env=()
            case ${base%-d[0-9]*} in
                *read) env=(GPUIPC_PEER_PUSH_MIN_BYTES=18446744073709551615 GPUIPC_PEER_COPY_MIN_BYTES=18446744073709551615) ;;
                *copy) env=(GPUIPC_PEER_PUSH_MIN_BYTES=18446744073709551615) ;;
                *push) env=(GPUIPC_PEER_PUSH_MIN_BYTES=0) ;;
                copy-spin) env=(GPUIPC_PEER_PUSH_MIN_BYTES=18446744073709551615 GPUIPC_READY_SPIN_US=200) ;;
            esac
            if [ "$base" != "$lanes" ]; then env+=(GPUIPC_PEER_COPY_LANES="${lanes#*@}"); fi
            env+=("${rows_env[@]}")
            log=$results/${way//[:+@]/_}-$size-r$round.txt
            if [ "$round" = 1 ]; then env "${env[@]}" "$host" validate "$file" | grep -E "^gen|^grade" | sed 's/^/    /'; fi
            if ! (cd "$work" && env "${env[@]}" "$host" run "$file" --frames "$frames" > "$log" 2>&1); then
                echo "$size $way r$round failed: see $log"
                tail -5 "$log"
                continue
            fi
            # The last stage's frames/s; two chains (duplex): the slower one's.
            fps=$(awk '$1 == "yuv" || $1 == "yuv2" {print $5}' "$log" | sort -n | head -1)
            # The same pipeline on one GPU (`one`, `sink-one`) has no link: no share of it.
            awk -v size="$size" -v way="$way" -v base="$base" -v r="$round" -v fps="$fps" -v bytes="$bytes" -v c="${ceiling:-0}" 'BEGIN {
                gb = fps * bytes / 1e9
                share = (c > 0 && base !~ /one(-d[0-9]+)?$/) ? sprintf("%.1f %%", 100 * gb / c) : "-"
                printf "%-10s %-16s %6s %12.1f %14.1f %12s\n", size, way, "r" r, fps, gb, share
            }'
        done
    done
done
