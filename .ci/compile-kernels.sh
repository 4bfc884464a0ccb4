#!/usr/bin/env bash
# Compile every kernels/*.cu with NVRTC 13.0 for sm_80 and sm_90 (no GPU needed).
#
# NVRTC comes from the PyPI package nvidia-cuda-nvrtc, installed into a virtual environment
# under the ignored target/ directory so the system Python is left alone; if `venv` is not
# available (Debian without python3-venv), into a plain `pip --target` directory instead.
# Arguments go to .ci/compile-kernels.py (e.g. a list of .cu files).
set -euo pipefail

NVRTC_PACKAGE="nvidia-cuda-nvrtc==13.0.88"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/target/nvrtc-venv"
script="$repo/.ci/compile-kernels.py"

if [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >/dev/null 2>&1; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$NVRTC_PACKAGE"
    exec "$venv/bin/python" "$script" "$@"
fi

echo "compile-kernels.sh: python3 -m venv unavailable, using pip --target" >&2
rm -rf "$venv"  # a half-made venv
pkgs="$repo/target/nvrtc-pkgs"
python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$pkgs" "$NVRTC_PACKAGE"
exec python3 "$script" --nvrtc-lib-dir "$pkgs/nvidia/cu13/lib" "$@"
