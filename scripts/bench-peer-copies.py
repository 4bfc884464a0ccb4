#!/usr/bin/env python3
"""What the link between two GPUs carries, one way and both ways at once, pulled and pushed.

`gpuipc-host doctor` times copies of 32 MiB out of the other GPU into one's own, one direction
at a time: the ceiling bench-two-gpus.sh divides by. A chain split cuda:0 -> cuda:1 -> cuda:0
uses the link both ways at once, so this measures that too, with frame-sized copies issued the
ways a stage could issue them:

  pull   the copy runs on a stream of the GPU that receives (what a consumer's copy-in does)
  push   the copy runs on a stream of the GPU that sends

Each case queues COPIES copies of FRAME_BYTES per direction (on LANES streams per direction,
the copies in turn) and times them from the first launch to the last copy's end; GB/s is per
direction. Needs Python with PyTorch (for device memory and streams) and the driver's
libcuda.so.1; run on a machine with two NVIDIA GPUs:

    python3 scripts/bench-peer-copies.py [FRAME_BYTES] [COPIES]
"""

import ctypes
import sys
import time

import torch


def main():
    frame = int(sys.argv[1]) if len(sys.argv) > 1 else 3840 * 3 * 2160  # a 4K rgb8 frame
    copies = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    if torch.cuda.device_count() < 2:
        print(f"skipped: {torch.cuda.device_count()} GPU(s)")
        return
    cuda = ctypes.CDLL("libcuda.so.1")
    memcpy = cuda.cuMemcpyDtoDAsync_v2
    memcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    memcpy.restype = ctypes.c_int

    # Peer access both ways, as the pipeline's mappings give (torch turns it on for a copy).
    bufs = {d: [torch.empty(frame, dtype=torch.uint8, device=f"cuda:{d}") for _ in range(4)] for d in (0, 1)}
    for d in (0, 1):
        for b in bufs[d]:
            b.random_(0, 256)
    bufs[0][0].copy_(bufs[1][0])
    bufs[1][0].copy_(bufs[0][0])
    for d in (0, 1):
        torch.cuda.synchronize(d)
    ok = torch.equal(bufs[0][0].cpu(), bufs[1][0].cpu())
    print(f"{torch.cuda.get_device_name(0)} x 2; frame {frame} bytes, {copies} copies a direction; "
          f"a copy each way checked: {'equal' if ok else 'DIFFERENT'}")

    # What the split 4K chain's kernels move in each GPU's own memory per frame, on streams
    # of their own beside the copies: cuda:0 writes a frame (generator) and reads one and writes
    # half of one (yuv420); cuda:1 reads one and writes one (rgb-process).
    kernels = {d: torch.cuda.Stream(device=d) for d in (0, 1)}
    scratch = {d: [torch.empty(frame, dtype=torch.uint8, device=f"cuda:{d}") for _ in range(2)] for d in (0, 1)}

    def chain_traffic():
        with torch.cuda.device(0), torch.cuda.stream(kernels[0]):
            scratch[0][0].fill_(7)
            scratch[0][1][: frame // 2].copy_(scratch[0][0][::2])
        with torch.cuda.device(1), torch.cuda.stream(kernels[1]):
            scratch[1][1].copy_(scratch[1][0])

    def case(name, directions, lanes, beside=False):
        """directions: (src, dst, how) run at once; how: 'pull' or 'push'; beside: the chain's
        kernels' own memory traffic runs beside the copies, one frame's for each copy."""
        work = []
        for src, dst, how in directions:
            runner = dst if how == "pull" else src
            streams = [torch.cuda.Stream(device=runner) for _ in range(lanes)]
            work.append((src, dst, runner, streams))
        for d in (0, 1):
            torch.cuda.synchronize(d)
        start = time.perf_counter()
        for i in range(copies):
            for src, dst, runner, streams in work:
                s = streams[i % lanes]
                with torch.cuda.device(runner):
                    rc = memcpy(bufs[dst][1 + i % 3].data_ptr(), bufs[src][1 + i % 3].data_ptr(), frame,
                                ctypes.c_void_p(s.cuda_stream))
                if rc != 0:
                    raise SystemExit(f"cuMemcpyDtoDAsync failed: CUresult {rc}")
            if beside:
                chain_traffic()
        for d in (0, 1):
            torch.cuda.synchronize(d)
        seconds = time.perf_counter() - start
        gbs = copies * frame / seconds / 1e9
        print(f"  {name:<44} {gbs:7.1f} GB/s a direction")
        return gbs

    for _ in range(2):
        case("warm-up", [(1, 0, "pull")], 1)
    for lanes in (1, 2):
        print(f"{lanes} stream(s) a direction:")
        case("pull 1 -> 0 alone", [(1, 0, "pull")], lanes)
        case("pull 0 -> 1 alone", [(0, 1, "pull")], lanes)
        case("push 0 -> 1 alone", [(0, 1, "push")], lanes)
        case("push 1 -> 0 alone", [(1, 0, "push")], lanes)
        case("pull both ways at once", [(0, 1, "pull"), (1, 0, "pull")], lanes)
        case("push both ways at once", [(0, 1, "push"), (1, 0, "push")], lanes)
        # Both copies on one GPU's copy engines, as a stage on cuda:1 pulling its input and
        # pushing its output would run them.
        case("0 -> 1 pulled, 1 -> 0 pushed, at once", [(0, 1, "pull"), (1, 0, "push")], lanes)
        case("pull both ways, the chain's kernels' traffic beside", [(0, 1, "pull"), (1, 0, "pull")], lanes, True)
        case("push both ways, the chain's kernels' traffic beside", [(0, 1, "push"), (1, 0, "push")], lanes, True)
    for d in (0, 1):
        torch.cuda.synchronize(d)


if __name__ == "__main__":
    main()
