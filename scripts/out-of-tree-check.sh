#!/usr/bin/env bash
# Build a plugin outside the workspace as a plugin author would, and run it (issue 10):
#
#   scripts/out-of-tree-check.sh       (after `cargo build --workspace`, as scripts/test.sh does)
#
# 1. scripts/new-plugin.sh makes a crate from plugin-api/template in a temporary folder outside
#    the repository, depending on this checkout's plugin-api by path;
# 2. it is built and tested offline with the repository's Cargo.lock copied in, and the lock it
#    ends with must hold no crate the repository's does not (a plugin needs nothing more);
# 3. gpuipc-host (the workspace's debug build) validates its pipeline.toml, refuses a param out
#    of range at plan time (exit code 2, naming the param), and runs it as separate processes
#    and in one process (--in-process), whose checksums of every stage's frames must be equal
#    and the plugin's output differ from its input.
# Its own target folder ($CARGO_TARGET_DIR or target, then out-of-tree/) keeps the
# dependencies built between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
host=$target/debug/gpuipc-host
if [ ! -x "$host" ] || [ ! -e "$target/debug/libgpuipc_generator.so" ]; then
    echo "out-of-tree check: build the workspace first (cargo build --workspace --locked)" >&2
    exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuipc-out-of-tree.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "out-of-tree check FAILED: $*" >&2; exit 1; }
start=$SECONDS

plugin=$work/tone-check
scripts/new-plugin.sh tone-check "$plugin" > /dev/null
cp Cargo.lock "$plugin/"
export CARGO_TARGET_DIR=$target/out-of-tree
(cd "$plugin" && cargo build --offline --quiet && cargo test --offline --quiet 2>&1 | grep -E "^test result|FAILED|panicked") ||
    fail "building or testing the template outside the workspace"
python3 - "$repo/Cargo.lock" "$plugin/Cargo.lock" <<'PY' || fail "the plugin needs crates the repository's Cargo.lock does not hold"
import re, sys
packages = lambda path: set(re.findall(r'name = "([^"]+)"\nversion = "([^"]+)"', open(path).read()))
extra = sorted(f"{n} {v}" for n, v in packages(sys.argv[2]) - packages(sys.argv[1]) if n != "gpuipc-tone-check")
if extra:
    print("not in the repository's Cargo.lock:", ", ".join(extra), file=sys.stderr)
    sys.exit(1)
PY

export GPUIPC_PLUGIN_PATH=$CARGO_TARGET_DIR/debug
[ -e "$GPUIPC_PLUGIN_PATH/libgpuipc_tone_check.so" ] || fail "no libgpuipc_tone_check.so in $GPUIPC_PLUGIN_PATH"
"$host" validate "$plugin/pipeline.toml" > "$work/validate.txt" 2>&1 || { cat "$work/validate.txt"; fail "validate"; }
sed 's/strength = 0.8/strength = 1.5/' "$plugin/pipeline.toml" > "$plugin/bad.toml"
set +e
"$host" validate "$plugin/bad.toml" > "$work/bad.txt" 2>&1
code=$?
set -e
[ "$code" = 2 ] && grep -q "param \`strength\` must be in 0..=1, got 1.5" "$work/bad.txt" ||
    { cat "$work/bad.txt"; fail "a bad param was not refused at plan time (exit code $code)"; }
for mode in processes in-process; do
    flag=; [ "$mode" = in-process ] && flag=--in-process
    (cd "$work" && "$host" run "$plugin/pipeline.toml" --frames 12 --quiet $flag --checksums "sums-$mode" \
        > "run-$mode.txt" 2>&1) || { cat "$work/run-$mode.txt"; fail "run ($mode)"; }
done
diff -r "$work/sums-processes" "$work/sums-in-process" || fail "separate processes and --in-process differ"
[ "$(wc -l < "$work/sums-processes/tone.sum")" -ge 12 ] || fail "the plugin's stage wrote fewer than 12 frames"
if cmp -s <(cut -d' ' -f2 "$work/sums-processes/gen.sum") <(cut -d' ' -f2 "$work/sums-processes/tone.sum"); then
    fail "the plugin's frames are its input's"
fi
echo "out-of-tree check: plugin from plugin-api/template built, tested and run (processes and in-process agree) in $((SECONDS - start)) s"
