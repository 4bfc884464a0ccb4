# Shared by the GPU benchmark scripts (bench-run.sh, bench-wait.sh, bench-latency.sh), which
# source it from their own folder: in a bundle of scripts/gpu-check.sh, or scripts/ here.
# Not run on its own.
#
# The pipeline generators write into $work and read $here/pipelines/4k-yuv.toml; each prints
# the path of the file it wrote.

# Find NVRTC for the stages' kernels (the driver's library folders first, then CUDA's usual
# places) and put its folder on LD_LIBRARY_PATH.
find_nvrtc() {
    for dir in $(ldconfig -p | awk '/libnvrtc.so/ {print $NF}' | xargs -r -n1 dirname) /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        if [ -e "$dir/libnvrtc.so.13" ] || [ -e "$dir/libnvrtc.so" ]; then export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
    done
}

# sized W H: generator -> rgb-process -> yuv420 at W x H (pipelines/4k-yuv.toml resized).
sized() {
    sed -e "s/width = 3840, height = 2160/width = $1, height = $2/" -e "s/^name = \"4k-yuv\"/name = \"yuv-$1x$2\"/" \
        "$here/pipelines/4k-yuv.toml" > "$work/yuv-$1x$2.toml"
    echo "$work/yuv-$1x$2.toml"
}

# chain N: generator, N-2 rgb-process stages, yuv420, at 1920 x 1080.
chain() {
    {
        printf '[pipeline]\nname = "chain-%s"\n\n[[stage]]\nname = "s1"\nplugin = "generator"\nparams = { width = 1920, height = 1080, pattern = "bars" }\n' "$1"
        for i in $(seq 2 $(( $1 - 1 ))); do
            printf '\n[[stage]]\nname = "s%s"\nplugin = "rgb-process"\ninputs = ["s%s"]\nparams = { brightness = 0.01, contrast = 1.01 }\n' "$i" $(( i - 1 ))
        done
        printf '\n[[stage]]\nname = "s%s"\nplugin = "yuv420"\ninputs = ["s%s"]\n' "$1" $(( $1 - 1 ))
    } > "$work/chain-$1.toml"
    echo "$work/chain-$1.toml"
}
