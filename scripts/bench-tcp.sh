#!/usr/bin/env bash
# The TCP bridge against a plain TCP stream of the same bytes on the same path, side by side in
# one run (docs/benchmarks.md, "TCP bridge against a plain TCP stream"):
#
#   scripts/bench-tcp.sh [BIN_DIR]
#
# BIN_DIR holds gpuipc-host, gpuipc-tcp-stream and the plugins (default: the bundle's bin/
# beside this script, else target/release). Built-in plugins are always the libraries beside
# the gpuipc-host that runs: to time release plugins under a debug gpuipc-host, hard-link both
# into one folder (docs/benchmarks.md gives the commands).
#
# For each path (loopback; a veth pair between two network namespaces this script makes and
# removes, root and `ip` needed, skipped otherwise) and each frame size (4K and 1080p rgb8):
#  - a plain stream: gpuipc-tcp-stream, each frame written from one buffer and read into one,
#    over 1 connection and over each count in CONNS;
#  - the bridge: a run of `generator -> tcp-send` and a run of `tcp-receive -> null` (two
#    `gpuipc-host run`s, as an agent runs each host's part), with `connections` each count of
#    CONNS and `window` each of WINDOWS; generator and sink on DEVICE (cuda:0 where
#    nvidia-smi sees a GPU, else cpu; the sink is yuv420 on a GPU, its output unread, and
#    null on cpu): with cuda, a frame goes down from the GPU before the link and up to it
#    after, as in a chain across hosts.
# Each line: frames/s and GB/s, the ratio to the plain stream of one connection (and to the
# plain stream of as many connections; for the NCCL bridge, to NCCL's own send/recv), and the
# CPU of each end (1.0 = one core: the stream's
# processes; the bridge's tcp-send and tcp-receive stages).
#
# With a GPU and NCCL (libnccl.so.2 in NCCL_DIR, or of the pip wheel nvidia-nccl-cu13, found
# as check.sh finds it): the NCCL bridge (generator -> nccl-send | nccl-receive -> null, all on
# DEVICE) against NCCL's own send/recv of the same bytes between two processes
# (`gpuipc-host __nccl-stream`), on the same paths; each end with its own NCCL_HOSTID (one GPU
# of one machine: NCCL would refuse two ranks on it otherwise), NCCL_NVLS_ENABLE=0.
#
# Under each bridge line, where each end's time went (their end-of-stream log lines: waiting
# for acknowledgements, writing, the kept copy; waiting for headers, reading payloads).
#
# Env: SIZES ("W H FRAMES;..."), CONNS (default "1 4"), WINDOWS (default "1"), PATHS
# ("loopback veth"), DEVICE, ROUNDS (default 1: each path's lines again, for the spread),
# KEEP=1 keeps the work folder.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
    if [ -x "$here/bin/gpuipc-host" ]; then bin=$here/bin; else bin=$here/../target/release; fi
fi
bin=$(cd "$bin" && pwd)
host=$bin/gpuipc-host
stream=$bin/gpuipc-tcp-stream
for f in "$host" "$stream" "$bin/libgpuipc_tcp_send.so" "$bin/libgpuipc_tcp_receive.so"; do
    [ -e "$f" ] || { echo "bench-tcp: no $f (build: cargo build --release --workspace)" >&2; exit 2; }
done
IFS=';' read -r -a sizes <<< "${SIZES:-3840 2160 200;1920 1080 600}"
conns_list=${CONNS:-1 4}
windows=${WINDOWS:-1}
paths=${PATHS:-loopback veth}
if [ -z "${DEVICE:-}" ]; then
    if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then DEVICE=cuda:0; else DEVICE=cpu; fi
fi
work=$(mktemp -d /tmp/bench-tcp.XXXXXX)
ns_a=gtcp$$a ns_b=gtcp$$b
netns_made=0
cleanup() {
    [ "$netns_made" = 1 ] && { ip netns del "$ns_a" 2>/dev/null; ip netns del "$ns_b" 2>/dev/null; }
    [ "${KEEP:-0}" = 1 ] && echo "work folder: $work" || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

make_veth() {  # two namespaces joined by a veth pair, 10.79.0.1 (a) and 10.79.0.2 (b)
    [ "$(id -u)" = 0 ] && command -v ip > /dev/null || { echo "skip veth: needs root and ip"; return 1; }
    ip netns add "$ns_a" && ip netns add "$ns_b" || { echo "skip veth: ip netns add failed"; return 1; }
    netns_made=1
    ip link add "va$$" netns "$ns_a" type veth peer name "vb$$" netns "$ns_b" &&
        ip -n "$ns_a" addr add 10.79.0.1/24 dev "va$$" && ip -n "$ns_b" addr add 10.79.0.2/24 dev "vb$$" &&
        ip -n "$ns_a" link set "va$$" up && ip -n "$ns_b" link set "vb$$" up &&
        ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up || { echo "skip veth: setting it up failed"; return 1; }
}

ratio() { python3 -c "a, b = $1, $2; print(f'{a / b:.2f}' if b else '-')"; }
port=$((20000 + $$ % 20000))
next_port() { port=$((port + 1)); }

# plain W H FRAMES CONNS: prints "FPS GBPS SENDER_CPU RECEIVER_CPU"
plain() {
    local bytes=$(($1 * $2 * 3)) out=$work/plain.txt
    next_port
    $run_b "$stream" receive "$addr_b:$port" "$bytes" "$3" "$4" > "$out.r" 2>&1 &
    local r=$!
    $run_a "$stream" send "$addr_b:$port" "$bytes" "$3" "$4" > "$out.s" 2>&1
    wait "$r"
    python3 - "$out.r" "$out.s" <<'PY'
import sys
def fields(path):
    line = [l for l in open(path) if l.startswith("stream ")]
    if not line:
        sys.stderr.write(open(path).read()); return None
    return dict(kv.split("=") for kv in line[0].split()[2:])
r, s = fields(sys.argv[1]), fields(sys.argv[2])
if r and s:
    print(r["frames_per_s"], r["gbytes_per_s"], s["cpu"], r["cpu"])
else:
    print("0 0 0 0")
PY
}

# nccl_plain W H FRAMES: as plain, NCCL's own send/recv (device buffers, one GPU).
nccl_plain() {
    local bytes=$(($1 * $2 * 3)) out=$work/nccl-plain.txt
    next_port
    $run_b env "${nccl_env[@]}" NCCL_HOSTID=b "$host" __nccl-stream receive "$addr_b:$port" "$bytes" "$3" "${DEVICE#cuda:}" > "$out.r" 2>&1 &
    local r=$!
    $run_a env "${nccl_env[@]}" NCCL_HOSTID=a "$host" __nccl-stream send "$addr_b:$port" "$bytes" "$3" "${DEVICE#cuda:}" > "$out.s" 2>&1
    wait "$r"
    python3 - "$out.r" "$out.s" <<'PY'
import sys
def fields(path):
    line = [l for l in open(path) if l.startswith("stream ")]
    if not line:
        sys.stderr.write(open(path).read()); return None
    return dict(kv.split("=") for kv in line[0].split()[2:])
r, s = fields(sys.argv[1]), fields(sys.argv[2])
print(*(r["frames_per_s"], r["gbytes_per_s"], s["cpu"], r["cpu"]) if r and s else (0, 0, 0, 0))
PY
}

# nccl_bridge W H FRAMES: as bridge, over nccl-send and nccl-receive.
nccl_bridge() {
    local w=$1 h=$2 frames=$3 d=$work/nccl-bridge
    next_port
    rm -rf "$d" && mkdir -p "$d/a" "$d/b"
    printf '%s\n' '[pipeline]' 'name = "b"' "device = \"$DEVICE\"" '' \
        '[[stage]]' 'name = "gen"' 'plugin = "nccl-receive"' \
        "params = { listen = \"$addr_b:$port\", link = \"gen->b\", format = \"rgb8\", width = $w, height = $h }" '' \
        '[[stage]]' 'name = "sink"' "plugin = \"$sink\"" 'inputs = ["gen"]' > "$d/b/p.toml"
    printf '%s\n' '[pipeline]' 'name = "a"' "device = \"$DEVICE\"" "frames = $frames" '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' "params = { width = $w, height = $h, pattern = \"noise\", seed = 5 }" '' \
        '[[stage]]' 'name = "gen-to-b"' 'plugin = "nccl-send"' 'inputs = ["gen"]' \
        "params = { to = \"$addr_b:$port\", link = \"gen->b\" }" > "$d/a/p.toml"
    (cd "$d/b" && $run_b env "${nccl_env[@]}" NCCL_HOSTID=b "$host" run p.toml --quiet --report report.json > run.txt 2> err.txt) &
    local r=$!
    (cd "$d/a" && $run_a env "${nccl_env[@]}" NCCL_HOSTID=a "$host" run p.toml --quiet --report report.json > run.txt 2> err.txt) ||
        { echo "nccl bridge: the sender's run failed:" >&2; tail -n 5 "$d/a/err.txt" "$d/a/run.txt" >&2; }
    wait "$r" || { echo "nccl bridge: the receiver's run failed:" >&2; tail -n 5 "$d/b/err.txt" "$d/b/run.txt" >&2; }
    python3 - "$d/a/report.json" "$d/b/report.json" "$((w * h * 3))" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except Exception:
    print("0 0 0 0"); sys.exit()
stage = lambda rep, name: next(s for s in rep["stages"] if s["name"] == name)
send, recv = stage(a, "gen-to-b"), stage(b, "gen")
fps = recv["fps"]
print(f'{fps:.1f} {fps * int(sys.argv[3]) / 1e9:.3f} {send["cpu"]:.2f} {recv["cpu"]:.2f}')
PY
}

# bridge W H FRAMES CONNS WINDOW: prints "FPS GBPS SENDER_CPU RECEIVER_CPU SENDER_BUSY"
bridge() {
    local w=$1 h=$2 frames=$3 conns=$4 window=$5 d=$work/bridge pattern=bars
    [ "$DEVICE" != cpu ] && pattern=noise
    next_port
    rm -rf "$d" && mkdir -p "$d/a" "$d/b"
    printf '%s\n' '[pipeline]' 'name = "b"' "device = \"$DEVICE\"" '' \
        '[[stage]]' 'name = "gen"' 'plugin = "tcp-receive"' 'device = "cpu"' \
        "params = { listen = \"$addr_b:$port\", link = \"gen->b\", format = \"rgb8\", width = $w, height = $h }" '' \
        '[[stage]]' 'name = "sink"' "plugin = \"$sink\"" 'inputs = ["gen"]' > "$d/b/p.toml"
    printf '%s\n' '[pipeline]' 'name = "a"' "device = \"$DEVICE\"" "frames = $frames" '' \
        '[[stage]]' 'name = "gen"' 'plugin = "generator"' "params = { width = $w, height = $h, pattern = \"$pattern\", seed = 5, threads = 1 }" '' \
        '[[stage]]' 'name = "gen-to-b"' 'plugin = "tcp-send"' 'device = "cpu"' 'inputs = ["gen"]' \
        "params = { to = \"$addr_b:$port\", link = \"gen->b\", window = $window, connections = $conns }" > "$d/a/p.toml"
    (cd "$d/b" && $run_b "$host" run p.toml --quiet --report report.json > run.txt 2> err.txt) &
    local r=$!
    (cd "$d/a" && $run_a "$host" run p.toml --quiet --report report.json > run.txt 2> err.txt) ||
        { echo "bridge: the sender's run failed:" >&2; tail -n 5 "$d/a/err.txt" "$d/a/run.txt" >&2; }
    wait "$r" || { echo "bridge: the receiver's run failed:" >&2; tail -n 5 "$d/b/err.txt" "$d/b/run.txt" >&2; }
    grep -h "frame(s)" "$d/a/err.txt" "$d/b/err.txt" | sed -e 's/^.*link /    /' > "$work/times.txt"
    python3 - "$d/a/report.json" "$d/b/report.json" "$((w * h * 3))" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except Exception:
    print("0 0 0 0 0"); sys.exit()
stage = lambda rep, name: next(s for s in rep["stages"] if s["name"] == name)
send, recv = stage(a, "gen-to-b"), stage(b, "gen")
fps = recv["fps"]
print(f'{fps:.1f} {fps * int(sys.argv[3]) / 1e9:.3f} {send["cpu"]:.2f} {recv["cpu"]:.2f} {send["busy"]:.2f}')
PY
}

# NCCL, where there is a GPU: NCCL_DIR, or the pip wheel's, or any libnccl.so.2 on the machine.
# The receiving end's consumer: on a GPU a cheap cuda stage (yuv420, its output unread), so
# that each frame goes up to the GPU after the link, as in a chain across hosts; else null.
sink=null
[ "$DEVICE" != cpu ] && sink=yuv420
nccl_env=()
if [ "$DEVICE" != cpu ]; then
    nccl_dir=${NCCL_DIR:-$(python3 -c 'import nvidia.nccl as n, os; print(os.path.join(os.path.dirname(n.__file__) if getattr(n, "__file__", None) else list(n.__path__)[0], "lib"))' 2>/dev/null)}
    if [ -z "$nccl_dir" ] || [ ! -e "$nccl_dir/libnccl.so.2" ]; then
        nccl_dir=$(find / -xdev -name 'libnccl.so.2*' -print -quit 2>/dev/null | xargs -r dirname)
    fi
    if [ -n "$nccl_dir" ]; then
        nccl_env=(LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0)
    else
        echo "no libnccl.so.2 (NCCL_DIR, or pip install nvidia-nccl-cu13): the NCCL lines are left out"
    fi
fi
echo "bench-tcp: $(nproc) cores, device $DEVICE, host $host, commit $(cat "$here/COMMIT" 2>/dev/null || git -C "$here" rev-parse --short HEAD 2>/dev/null)"
printf '%-9s %-10s %-26s %9s %7s %8s %8s %9s %9s\n' path size what frames/s GB/s "/plain1" "/plainN" "send cpu" "recv cpu"
for round in $(seq 1 "${ROUNDS:-1}"); do
for path in $paths; do
    case $path in
        loopback) run_a="" run_b="" addr_b=127.0.0.1 ;;
        veth)
            [ "$netns_made" = 1 ] || make_veth || continue
            run_a="ip netns exec $ns_a" run_b="ip netns exec $ns_b" addr_b=10.79.0.2 ;;
        *) echo "unknown path $path"; continue ;;
    esac
    for size in "${sizes[@]}"; do
        set -- $size
        w=$1 h=$2 frames=$3
        declare -A plain_fps=()
        for c in 1 $conns_list; do
            [ -n "${plain_fps[$c]:-}" ] && continue
            read -r fps gbps scpu rcpu < <(plain "$w" "$h" "$frames" "$c")
            plain_fps[$c]=$fps
            printf '%-9s %-10s %-26s %9s %7s %8s %8s %9s %9s\n' "$path" "${w}x$h" "plain, $c conn" "$fps" "$gbps" \
                "$(ratio "$fps" "${plain_fps[1]}")" "" "$scpu" "$rcpu"
        done
        for c in $conns_list; do
            for win in $windows; do
                read -r fps gbps scpu rcpu busy < <(bridge "$w" "$h" "$frames" "$c" "$win")
                printf '%-9s %-10s %-26s %9s %7s %8s %8s %9s %9s\n' "$path" "${w}x$h" "bridge $DEVICE, $c conn, win $win" "$fps" "$gbps" \
                    "$(ratio "$fps" "${plain_fps[1]}")" \
                    "$(ratio "$fps" "${plain_fps[$c]}")" "$scpu" "$rcpu"
                cat "$work/times.txt"
            done
        done
        if [ "${#nccl_env[@]}" -gt 0 ]; then
            read -r nfps gbps scpu rcpu < <(nccl_plain "$w" "$h" "$frames")
            printf '%-9s %-10s %-26s %9s %7s %8s %8s %9s %9s\n' "$path" "${w}x$h" "nccl send/recv" "$nfps" "$gbps" \
                "$(ratio "$nfps" "${plain_fps[1]}")" "" "$scpu" "$rcpu"
            read -r fps gbps scpu rcpu < <(nccl_bridge "$w" "$h" "$frames")
            printf '%-9s %-10s %-26s %9s %7s %8s %8s %9s %9s\n' "$path" "${w}x$h" "nccl bridge $DEVICE" "$fps" "$gbps" \
                "$(ratio "$fps" "${plain_fps[1]}")" "$(ratio "$fps" "$nfps")" "$scpu" "$rcpu"
        fi
        unset plain_fps
    done
done
done
