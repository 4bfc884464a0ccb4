#!/usr/bin/env bash
# Print a pipeline that decodes each CLIP with a `video` source (stages decode0, decode1, ...),
# each into a `null` sink (sink0, sink1, ...): the pipeline of the GPU checks' video section
# and of bench-decode.sh. Environment: EXTRA is added to every source's params, e.g.
# EXTRA=', loop = true'; STAGE_KEYS to every source's stage table, e.g.
# STAGE_KEYS='restart = "on-failure"'; ISOLATION sets the pipeline's `isolation`; NO_SINK=1
# leaves the sinks out (each source then decodes into memory of its own: nothing is copied
# to a consumer).
#
#   scripts/video-pipeline.sh clip.mp4 other.hevc > decode.toml
set -euo pipefail
echo '[pipeline]'
echo 'name = "decode"'
[ -n "${ISOLATION:-}" ] && echo "isolation = \"$ISOLATION\""
i=0
for clip in "$@"; do
    printf '\n[[stage]]\nname = "decode%d"\nplugin = "video"\n%s\nparams = { path = "%s"%s }\n' "$i" "${STAGE_KEYS:-}" "$clip" "${EXTRA:-}"
    [ "${NO_SINK:-}" = 1 ] || printf '\n[[stage]]\nname = "sink%d"\nplugin = "null"\ninputs = ["decode%d"]\n' "$i" "$i"
    i=$((i + 1))
done
