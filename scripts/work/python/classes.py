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
