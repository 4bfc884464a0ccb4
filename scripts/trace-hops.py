#!/usr/bin/env python3
"""Where a chain's frames spend their latency, step by step, from the frame traces its stages
wrote (`GPUIPC_TRACE=DIR`, see docs/benchmarks-history.md, "Where the latency goes").

    scripts/trace-hops.py DIR

Takes the newest trace of each stage in DIR (a `gpuipc-host bench` writes its paced latency
run last; a stage with replicas or restarts has several processes, of which this reads one),
orders the stages by when they publish a frame, and splits each frame's time from its
source's stamp to the end of the last stage's GPU work into steps:

    S publish      the source: stamp -> its publish begins (launch, events recorded)
    S wake         a consumer: its producer's publish began -> it holds the frame (the
                   producer's wake-up call, the ring wait)
    S ready        it holds the frame -> the producer's GPU work is seen done (or left to
                   the GPU to wait for)
    S launch       -> the plugin's work enqueued (output slot, prepare, process)
    S publish      -> its publish begins (events recorded, a replica's turn, checksum)
    S measure      the last stage: -> the GPU finished the frame (bench's wait on an event)

and prints each step's median over all frames and its mean over the slowest 1 % of frames,
then the slowest frames one by one. Times in microseconds.
"""
import os
import statistics
import sys

# Columns of a trace line: seq, stamp, cpu, then the end of each phase in this order.
PHASES = ["wait input", "open input", "wait output", "prepare output", "process",
          "close input", "finish output", "publish", "measure", "start", "publish begins"]


def read_trace(path):
    """{seq: (stamp, {phase: end})}, {seq: cpu}, and the scheduler's figures of the thread."""
    frames, cpus, sched = {}, {}, ""
    with open(path) as f:
        for line in f:
            if line.startswith("# schedstat"):
                figures = line.split(":", 1)[1].split()
                if len(figures) >= 3:
                    run, queued, slices = figures[:3]
                    sched = f"ran {int(run) / 1e6:.0f} ms, waited {int(queued) / 1e6:.1f} ms runnable in {slices} slices"
            elif line.startswith("# ") and "ctxt_switches" in line:
                sched += "; " + " ".join(line[2:].split())
            if line.startswith("#") or not line.strip():
                continue
            cols = [int(c) for c in line.split()]
            seq, stamp, cpu, ends = cols[0], cols[1], cols[2], dict(zip(PHASES, cols[3:]))
            frames[seq] = (stamp, ends)
            cpus[seq] = cpu
    return frames, cpus, sched


def newest_traces(folder):
    newest = {}
    for name in os.listdir(folder):
        if not name.endswith(".trace"):
            continue
        stage = name.rsplit(".", 2)[0]
        path = os.path.join(folder, name)
        if stage not in newest or os.path.getmtime(path) > os.path.getmtime(newest[stage]):
            newest[stage] = path
    return {stage: read_trace(path) for stage, path in newest.items()}


def steps_of(order, traces, seq):
    """The steps of frame `seq` as (name, µs), or None where a stage lacks it."""
    rows = [traces[s].get(seq) for s in order]
    if any(r is None for r in rows):
        return None
    stamp = rows[0][0]
    us = lambda a, b: (b - a) / 1000.0
    steps = [(f"{order[0]} publish", us(stamp, rows[0][1]["publish begins"]))]
    for i in range(1, len(order)):
        prev, (_, e) = rows[i - 1][1], rows[i]
        steps += [
            (f"{order[i]} wake", us(prev["publish begins"], e["wait input"])),
            (f"{order[i]} ready", us(e["wait input"], e["open input"])),
            (f"{order[i]} launch", us(e["open input"], e["process"])),
            (f"{order[i]} publish", us(e["process"], e["publish begins"])),
        ]
    last = rows[-1][1]
    steps.append((f"{order[-1]} measure", us(last["publish begins"], last["measure"])))
    return steps


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    read = newest_traces(sys.argv[1])
    traces = {stage: r[0] for stage, r in read.items()}
    cpus = {stage: r[1] for stage, r in read.items()}
    if len(traces) < 2:
        sys.exit(f"{sys.argv[1]}: traces of at least two stages needed, found {sorted(traces)}")

    def publish_delay(stage):
        return statistics.median(e["publish begins"] - stamp for stamp, e in traces[stage].values())

    order = sorted(traces, key=publish_delay)
    seqs = sorted(set.intersection(*(set(t) for t in traces.values())))
    # The first frames set up the GPU: leave the first 1 % out.
    seqs = seqs[len(seqs) // 100:]
    frames = [(seq, steps_of(order, traces, seq)) for seq in seqs]
    frames = [(seq, st) for seq, st in frames if st]
    if not frames:
        sys.exit("no frame is in every stage's trace")
    total = lambda st: sum(v for _, v in st)
    frames.sort(key=lambda f: total(f[1]))
    n = len(frames)
    tail = frames[int(n * 0.99):]
    names = [name for name, _ in frames[0][1]]
    print(f"stages in order: {' -> '.join(order)}; {n} frames")
    at = lambda q: total(frames[round((n - 1) * q)][1])  # as `bench` picks its percentiles
    print(f"latency: p50 {at(0.5):.1f}  p99 {at(0.99):.1f}  max {at(1.0):.1f} µs")
    print(f"{'step':<28} {'median':>8} {'slowest 1 % (mean)':>20}")
    for i, name in enumerate(names):
        med = statistics.median(st[i][1] for _, st in frames)
        mean_tail = statistics.mean(st[i][1] for _, st in tail)
        print(f"{name:<28} {med:8.1f} {mean_tail:20.1f}")
    # A consumer that ran on its producer's CPU: the scheduler put the woken one there.
    shared = lambda fs: statistics.mean(
        sum(cpus[a][seq] == cpus[b][seq] for a, b in zip(order, order[1:])) / (len(order) - 1) for seq, _ in fs)
    print(f"hops whose two stages ran on one CPU: {shared(frames) * 100:.1f} % of all frames' hops, {shared(tail) * 100:.1f} % of the slowest 1 %'s")
    for stage in order:
        print(f"  {stage}: {read[stage][2]}")
    print("slowest frames (seq: total, the steps over 20 µs above their median, the CPU of each stage):")
    medians = [statistics.median(st[i][1] for _, st in frames) for i in range(len(names))]
    for seq, st in frames[-10:][::-1]:
        over = [f"{name} +{v - m:.0f}" for (name, v), m in zip(st, medians) if v - m > 20]
        print(f"  {seq}: {total(st):.1f}  {', '.join(over)}  (cpus {'/'.join(str(cpus[s][seq]) for s in order)})")


if __name__ == "__main__":
    main()
