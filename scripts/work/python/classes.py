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


class DefaultStream(Noop):
    def __init__(self, params, input_formats, output_format, ctx):
        import torch
        self.torch = torch

    def process(self, inputs, output, ctx):
        for src, dst in zip(inputs[0].planes, output.planes):
            self.torch.bitwise_not(self.torch.from_dlpack(src), out=self.torch.from_dlpack(dst))
