"""An invert in PyTorch on the GPU, equal to `rgb-process` with `invert = true`: every byte
c becomes 255 - c (`~c` for uint8). The frames are the ring slots themselves (DLPack, no
copy), and the work is queued on the stage's stream, so the interprocess events that order
the stages keep their meaning.

Two habits keep PyTorch's own cost a frame low (docs/benchmarks.md, "What a Python stage costs a frame"): the
stage's stream is made torch's current stream once, in `__init__` (a stage's `__init__` and all
its calls run on one thread; a `with torch.cuda.stream(...)` block costs 10-35 µs a frame),
and each plane's tensor is made once and kept, keyed by the plane (a slot's plane is the same
object at every frame in that slot; `torch.from_dlpack` costs 8-13 µs a call). Kept
tensors skip the stream hand-over of `__dlpack__`, so they are for work on the stage's stream
only, as here.

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
        torch.cuda.set_stream(self.stream)
        self.tensors = {}

    def view(self, plane):
        tensor = self.tensors.get(plane)
        if tensor is None:
            tensor = self.tensors[plane] = torch.from_dlpack(plane)
        return tensor

    def process(self, inputs, output, ctx):
        for src, dst in zip(inputs[0].planes, output.planes):
            torch.bitwise_not(self.view(src), out=self.view(dst))
