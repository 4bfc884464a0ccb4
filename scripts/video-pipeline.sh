#!/usr/bin/env bash
# Print a pipeline that decodes each CLIP with a `video` source (stages decode0, decode1, ...),
# each into a `null` sink (sink0, sink1, ...): the pipeline of the GPU checks' video section
# and of bench-decode.sh. EXTRA (an environment variable) is added to every source's params,
# e.g. EXTRA=', loop = true'; STAGE_KEYS to every source's stage table, e.g. 'restart = "on-failure"'.
#
#   scripts/video-pipeline.sh clip.mp4 other.hevc > decode.toml
set -euo pipefail
echo '[pipeline]'
echo 'name = "decode"'
i=0
for clip in "$@"; do
    printf '\n[[stage]]\nname = "decode%d"\nplugin = "video"\n%s\nparams = { path = "%s"%s }\n' "$i" "${STAGE_KEYS:-}" "$clip" "${EXTRA:-}"
    printf '\n[[stage]]\nname = "sink%d"\nplugin = "null"\ninputs = ["decode%d"]\n' "$i" "$i"
    i=$((i + 1))
done
