#!/usr/bin/env bash
# Check the format and the import floors, then run every test: unit tests, the bad-pipeline
# corpus, ABI checks and the multi-process pipeline tests. The tests load the plugin cdylibs,
# so the whole workspace is built first.
#
# A test that needs a GPU, NVRTC or NCCL this machine lacks returns early, and cargo test counts
# it as passed; each such test appends a line to $GPUIPC_SKIP_LOG (plugin-api/cuda's testing
# module), and the end of this script says how many were skipped and why, failed run or not.
set -euo pipefail
cd "$(dirname "$0")/.."

skips=$(mktemp "${TMPDIR:-/tmp}/gpuipc-skipped.XXXXXX")
say_skips() {
    local n
    n=$(wc -l <"$skips")
    if [ "$n" -eq 0 ]; then
        echo "== no test was skipped for want of a GPU, NVRTC or NCCL"
    else
        local tests="$n tests were"
        if [ "$n" -eq 1 ]; then tests="1 test was"; fi
        echo "== $tests skipped for want of a GPU, NVRTC or NCCL (cargo test counted them as passed):"
        # Lines are `<why>\t<test>`: each reason with its count, then its tests.
        sort "$skips" | awk -F'\t' '
            function flush() { if (n) { printf "  %d: %s\n%s", n, why, names } }
            $1 != why { flush(); why = $1; n = 0; names = "" }
            { n++; names = names "      " $2 "\n" }
            END { flush() }'
    fi
    rm -f "$skips"
}
trap say_skips EXIT
export GPUIPC_SKIP_LOG="$skips"

# One format (rustfmt.toml): `cargo fmt --all` writes it. No lint warning (the workspace's
# lints in Cargo.toml, and clippy's).
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# host/src's import floors: no circle, no import from a lower floor up (main.rs says the floors).
python3 scripts/import-floors.py
# The files that allow unsafe code are the ones docs/security.md lists.
listed=$(sed -n '/<!-- unsafe-files: begin -->/,/<!-- unsafe-files: end -->/p' docs/security.md | sed -n 's/^- `\(.*\)`$/\1/p' | sort)
allowed=$(git grep -l 'allow(unsafe_code)' -- '*.rs' | sort)
if [ "$listed" != "$allowed" ]; then
    echo "the files that allow unsafe code differ from docs/security.md's list (< listed, > in the code):" >&2
    diff <(echo "$listed") <(echo "$allowed") >&2
    exit 1
fi
cargo build --workspace --locked
cargo test --workspace --locked
