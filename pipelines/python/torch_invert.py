"""An invert in PyTorch on the GPU, equal to `rgb-process` with `invert = true`: every byte
c becomes 255 - c (`~c` for uint8). The frames are the ring slots themselves (DLPack, no
copy), and the work is queued on the stage's stream, so the interprocess events that order
the stages keep their meaning.

    [[stage]]
    plugin = "python"
    device = "cuda"
    params = { script = "pipelines/python/torch_invert.py", class = "Invert" }
"""
import torch


class Invert:
    def __init__(self, params, input_formats, output_format, ctx):
        if ctx.domain != "cuda":
            raise ValueError("torch_invert.py runs on the GPU: give its stage device = \"cuda\"")
        self.stream = torch.cuda.ExternalStream(ctx.cuda_stream, device=torch.device("cuda", ctx.device))

    def process(self, inputs, output, ctx):
        with torch.cuda.stream(self.stream):
            for src, dst in zip(inputs[0].planes, output.planes):
                torch.bitwise_not(torch.from_dlpack(src), out=torch.from_dlpack(dst))
