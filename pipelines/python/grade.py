"""A colour grade in NumPy, equal byte for byte to the built-in `rgb-process` with the same
params: every code goes through one table, `v = c / 255; v = (v - 0.5) * contrast + 0.5 +
brightness; clamp to [0, 1]; v = v ** (1 / gamma); if invert: v = 1 - v; round(v * 255)`
(halves away from zero, as Rust rounds), alpha copied.

    [[stage]]
    plugin = "python"
    params = { script = "pipelines/python/grade.py", class = "Grade", contrast = 1.2 }
"""
import math

import numpy as np


class Grade:
    # No `negotiate`: the output has the input's format.

    def __init__(self, params, input_formats, output_format, ctx):
        brightness = float(params.get("brightness", 0.0))
        contrast = float(params.get("contrast", 1.0))
        gamma = float(params.get("gamma", 1.0))
        invert = bool(params.get("invert", False))
        if input_formats[0].pixel not in ("rgb8", "rgba8", "gray8"):
            raise ValueError(f"Grade takes rgb8, rgba8 or gray8, not {input_formats[0].pixel}")
        table = []
        for c in range(256):
            v = min(max((c / 255.0 - 0.5) * contrast + 0.5 + brightness, 0.0), 1.0)
            v = math.pow(v, 1.0 / gamma)
            if invert:
                v = 1.0 - v
            table.append(math.floor(v * 255.0 + 0.5))
        self.table = np.array(table, dtype=np.uint8)
        self.rgba = input_formats[0].pixel == "rgba8"

    def process(self, inputs, output, ctx):
        src, dst = inputs[0].planes[0], output.planes[0]
        if self.rgba:
            dst[..., :3] = self.table[src[..., :3]]
            dst[..., 3] = src[..., 3]
        else:
            dst[...] = self.table[src]
