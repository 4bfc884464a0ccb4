"""An invert in PyTorch on the GPU, equal to `rgb-process` with `invert = true`: every byte
c becomes 255 - c (`~c` for uint8). The frames are the ring slots themselves (DLPack, no
copy), and the work is queued on the stage's stream, so the interprocess events that order
the stages keep their meaning.

A slot's plane is the same object at every frame in that slot, so each plane's tensor is made
once and kept, keyed by the plane: `torch.from_dlpack` costs about 15 µs a call
(docs/benchmarks.md, "The Python stage"). Kept tensors skip the stream hand-over of
`__dlpack__`, so they are for work on the stage's stream only, as here.

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
        self.tensors = {}

    def view(self, plane):
        tensor = self.tensors.get(plane)
        if tensor is None:
            tensor = self.tensors[plane] = torch.from_dlpack(plane)
        return tensor

    def process(self, inputs, output, ctx):
        with torch.cuda.stream(self.stream):
            for src, dst in zip(inputs[0].planes, output.planes):
                torch.bitwise_not(self.view(src), out=self.view(dst))
