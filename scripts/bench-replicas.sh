#!/usr/bin/env bash
# Replicas of a cpu stage that bounds its pipeline: a 4K generator (bars, 4 threads) ->
# yuv420 with threads = 1 and `replicas = N` -> null, for N = 1, 2, 4, 8 (those that fit the
# cores), each three times; prints frames/s of the sink and the speed-up against one replica.
#
#   scripts/bench-replicas.sh [GPUIPC_HOST] [FRAMES]
# (default: target/release/gpuipc-host, 300 frames; run `cargo build --release` first)
set -euo pipefail
host=${1:-$(dirname "$0")/../target/release/gpuipc-host}
frames=${2:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
base=""
for n in 1 2 4 8; do
    [ "$n" -le "$cores" ] || break
    cat > "$work/r$n.toml" <<TOML
[pipeline]
name = "replicas-$n"
device = "cpu"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 3840, height = 2160, pattern = "bars", threads = 4 }

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
replicas = $n
params = { threads = 1 }

[[stage]]
name = "sink"
plugin = "null"
inputs = ["yuv"]
TOML
    rates=()
    for _ in 1 2 3; do
        rates+=("$("$host" run "$work/r$n.toml" --frames "$frames" --quiet 2>/dev/null | awk '$1 == "sink" {print $5}')")
    done
    best=$(printf '%s\n' "${rates[@]}" | sort -g | tail -1)
    [ -n "$base" ] || base=$best
    printf 'replicas %d: %s frames/s (best of %s)  %.2fx one replica\n' "$n" "$best" "${rates[*]}" "$(awk -v a="$best" -v b="$base" 'BEGIN {print a / b}')"
done
