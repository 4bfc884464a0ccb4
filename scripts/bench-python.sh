#!/usr/bin/env bash
# What a Python stage costs a frame, in parts, on a machine with an NVIDIA GPU (from a bundle of
# scripts/gpu-check.sh: BUNDLE_DIR/bench-python.sh [FRAMES]); without a GPU (or with
# DEVICE=cpu) the cpu-domain rows alone, with NumPy.
#
# Every row is one run of generator -> STAGE, the stage's frames/s, the time its plugin call
# took a frame (the run report's `busy` over its frames/s) and its process's host CPU a frame;
# a Python stage's log line (GPUIPC_LOG=info,plugin=debug) splits its call into the GIL, the
# frames and arguments, the class's `process` and the stream order after it. The classes, each
# adding one thing to the one before (so the differences are the parts' costs):
#
#   rust     rgb-process inverting: a Rust stage doing the work, for reference
#   noop     a Python class whose process does nothing
#   touch    reads every plane and the frame's seq
#   dlpack   torch.from_dlpack of every plane on the stage's stream (no kernel)
#   invert   ~frame on the stage's stream, each plane's tensor made anew every frame
#   default  the same invert on torch's default stream: the planes are handed to another
#            stream, ordered with the stage's by events on the GPU
#   cached   the invert with each plane's tensor made once (a dict keyed by the plane: a slot's
#            plane is the same object every frame), on the stage's stream (`with`)
#   setonce  pipelines/python/torch_invert.py: cached, and the stage's stream made torch's
#            current once, in __init__
#
# Sizes: SIZES="256x256 3840x2160" (the small one is host-bound: the GPU's share of a frame is
# about a microsecond). GPUIPC_PYTHON names the interpreter (else python3). BEFORE=DIR also runs
# every row with the python plugin of another build (`plugin = "DIR/libgpuipc_python.so"`),
# labelled `before`, the rows interleaved.
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
if [ -x "$here/bin/gpuipc-host" ]; then host=$here/bin/gpuipc-host; repo=$here; else
    repo=$(cd .. && pwd)
    host=$repo/target/release/gpuipc-host
fi
results=${OUT:-$here/results}/python
work=$here/work/python
mkdir -p "$results" "$work"
frames=${1:-5000}
python=${GPUIPC_PYTHON:-python3}
export GPUIPC_PYTHON=$python
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
if [ -e "$here/lib-bench.sh" ]; then
    . "$here/lib-bench.sh"
    find_nvrtc
fi
device=${DEVICE:-cuda}
if [ "$device" = cuda ] && ! nvidia-smi >/dev/null 2>&1; then device=cpu; fi
if [ "$device" = cuda ]; then
    echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores; commit $(cat "$here/COMMIT" 2>/dev/null || git -C "$repo" rev-parse --short HEAD)"
else
    echo "machine: no GPU (cpu domain, NumPy), $(nproc) cores; commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || cat "$here/COMMIT")"
fi
"$python" -c "import sys; print('Python', sys.version.split()[0])"
has_torch=0
if [ "$device" = cuda ] && "$python" -c "import torch" 2>/dev/null; then has_torch=1; fi

cat > "$work/classes.py" <<'PY'
class Noop:
    def __init__(self, params, input_formats, output_format, ctx):
        pass

    def process(self, inputs, output, ctx):
        pass


class Touch(Noop):
    def process(self, inputs, output, ctx):
        for frame in inputs:
            for plane in frame.planes:
                pass
            frame.info.seq
        for plane in output.planes:
            pass


class Dlpack(Noop):
    def __init__(self, params, input_formats, output_format, ctx):
        import torch
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(ctx.cuda_stream, device=torch.device("cuda", ctx.device))

    def process(self, inputs, output, ctx):
        with self.torch.cuda.stream(self.stream):
            for plane in inputs[0].planes:
                self.torch.from_dlpack(plane)
            for plane in output.planes:
                self.torch.from_dlpack(plane)


class Uncached(Noop):
    def __init__(self, params, input_formats, output_format, ctx):
        import torch
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(ctx.cuda_stream, device=torch.device("cuda", ctx.device))

    def process(self, inputs, output, ctx):
        with self.torch.cuda.stream(self.stream):
            for src, dst in zip(inputs[0].planes, output.planes):
                self.torch.bitwise_not(self.torch.from_dlpack(src), out=self.torch.from_dlpack(dst))


class Cached(Noop):
    def __init__(self, params, input_formats, output_format, ctx):
        import torch
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(ctx.cuda_stream, device=torch.device("cuda", ctx.device))
        self.tensors = {}

    def view(self, plane):
        tensor = self.tensors.get(plane)
        if tensor is None:
            tensor = self.tensors[plane] = self.torch.from_dlpack(plane)
        return tensor

    def process(self, inputs, output, ctx):
        with self.torch.cuda.stream(self.stream):
            for src, dst in zip(inputs[0].planes, output.planes):
                self.torch.bitwise_not(self.view(src), out=self.view(dst))


class SetOnce(Cached):
    def __init__(self, params, input_formats, output_format, ctx):
        super().__init__(params, input_formats, output_format, ctx)
        self.torch.cuda.set_stream(self.stream)

    def process(self, inputs, output, ctx):
        for src, dst in zip(inputs[0].planes, output.planes):
            self.torch.bitwise_not(self.view(src), out=self.view(dst))


class DefaultStream(Noop):
    def __init__(self, params, input_formats, output_format, ctx):
        import torch
        self.torch = torch

    def process(self, inputs, output, ctx):
        for src, dst in zip(inputs[0].planes, output.planes):
            self.torch.bitwise_not(self.torch.from_dlpack(src), out=self.torch.from_dlpack(dst))
PY

# stage_params CLASS: the stage's plugin and params
stage_params() {
    case $1 in
        rust) echo 'plugin = "rgb-process"
params = { invert = true }' ;;
        noop) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"Noop\" }" ;;
        touch) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"Touch\" }" ;;
        dlpack) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"Dlpack\" }" ;;
        invert) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"Uncached\" }" ;;
        default) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"DefaultStream\" }" ;;
        cached) echo "plugin = \"python\"
params = { script = \"$work/classes.py\", class = \"Cached\" }" ;;
        setonce) echo "plugin = \"python\"
params = { script = \"$repo/pipelines/python/torch_invert.py\", class = \"Invert\" }" ;;
    esac
}

classes="rust noop touch"
if [ "$has_torch" = 1 ]; then classes="$classes dlpack invert default cached setonce"; fi
printf '%-10s %-8s %-7s %12s %16s %16s  %s\n' size class build "frames/s" "call µs/frame" "cpu µs/frame" "the Python call in parts"
for size in ${SIZES:-256x256 3840x2160}; do
    w=${size%x*}
    h=${size#*x}
    for class in $classes; do
      for build in now ${BEFORE:+before}; do
        if [ "$class" = rust ] && [ "$build" = before ]; then continue; fi
        file=$work/$class-$size-$build.toml
        printf '[pipeline]\nname = "py-%s"\ndevice = "%s"\n\n[[stage]]\nname = "gen"\nplugin = "generator"\nparams = { width = %s, height = %s, pattern = "gradient" }\n\n[[stage]]\nname = "stage"\ninputs = ["gen"]\n%s\n' \
            "$class" "$device" "$w" "$h" "$(stage_params "$class")" > "$file"
        if [ "$build" = before ]; then sed -i "s|^plugin = \"python\"|plugin = \"$BEFORE/libgpuipc_python.so\"|" "$file"; fi
        log=$results/$class-$size-$build.txt
        if ! (cd "$work" && GPUIPC_LOG=info,plugin=debug "$host" run "$file" --frames "$frames" > "$log" 2>&1); then
            printf '%-10s %-8s %-7s failed: see %s\n' "$size" "$class" "$build" "$log"
            tail -5 "$log"
            continue
        fi
        row=$(awk '$1 == "stage" && $2 != "plugin" {print $5, $9, $10}' "$log")
        parts=$(sed -n 's/.*python stage: [0-9]* calls; µs a call: //p' "$log" | head -1)
        echo "$row" | awk -v size="$size" -v class="$class" -v build="$build" -v parts="$parts" '{
            fps = $1; busy = $2; cpu = $3; sub("%", "", busy); sub("%", "", cpu)
            printf "%-10s %-8s %-7s %12.0f %16.2f %16.2f  %s\n", size, class, build, fps, busy / 100 * 1e6 / fps, cpu / 100 * 1e6 / fps, parts
        }'
      done
    done
done
if [ "$has_torch" = 1 ]; then
    echo "$("$python" "$repo/pipelines/python/torch_bench.py" "$frames")"
fi
