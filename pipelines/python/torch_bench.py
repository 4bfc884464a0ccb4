"""The torch code of torch_invert.py alone, in one process: frames/s of `~frame` on 4K RGB8
frames already on the GPU (what the pipeline's torch stage is compared with).

    python3 pipelines/python/torch_bench.py [FRAMES]
"""
import sys
import time

import torch

frames = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
src = torch.randint(0, 256, (2160, 3840, 3), dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
for _ in range(50):
    torch.bitwise_not(src, out=dst)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(frames):
    torch.bitwise_not(src, out=dst)
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(f"torch in one process: {frames / seconds:.1f} frames/s ({frames} 4K RGB8 frames, {torch.cuda.get_device_name()})")
