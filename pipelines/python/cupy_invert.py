"""The same invert as torch_invert.py, in CuPy: frames by DLPack, work on the stage's stream.

    params = { script = "pipelines/python/cupy_invert.py", class = "Invert" }
"""
import cupy


class Invert:
    def __init__(self, params, input_formats, output_format, ctx):
        if ctx.domain != "cuda":
            raise ValueError("cupy_invert.py runs on the GPU: give its stage device = \"cuda\"")
        self.stream = cupy.cuda.ExternalStream(ctx.cuda_stream, ctx.device)

    def process(self, inputs, output, ctx):
        with self.stream:
            for src, dst in zip(inputs[0].planes, output.planes):
                cupy.invert(cupy.from_dlpack(src), out=cupy.from_dlpack(dst))
