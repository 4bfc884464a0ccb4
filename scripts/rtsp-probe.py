#!/usr/bin/env python3
"""A plain RTSP client (standard library only) that PLAYs N streams over TCP interleaved and
measures how late each frame arrives: the server and the network alone, without the pipeline.

    rtsp-probe.py BASE_URL N [--seconds 10] [--warmup 2] [--path cam{k}] [--late-ms 100]

PLAYs BASE_URL/cam0 .. cam{N-1} (one thread for all of them: select over the sockets, so the
probe itself adds no lock or thread of its own to what it measures), discards the first --warmup
seconds, then for --seconds records when each frame's last packet (the RTP marker) arrived
against its RTP time. A frame's lateness: its arrival less its RTP time, less the least of that
difference over the stream (the least-delayed arrival, as the rtsp source maps a camera's clock).
Prints per stream its frames a second, worst and p99 lateness, and frames later than --late-ms;
then each moment (0.25 s bins) where several streams were late at once, which tells a stall
every stream shares (the server's process, the host) from one stream's (its socket); then a
summary line:

    probe N=32 frames/s min 30.0 late>100ms 0 worst 12.3 ms p99 4.1 ms shared-stalls 0 probe-cpu 21 %

probe-cpu is this process's CPU over the window (100 %: one core); near 100 % the probe could not
keep up and its figures say so, not the server's.
"""
import argparse
import os
import select
import socket
import struct
import sys
import time


def request(sock, buf, method, url, cseq, headers=()):
    lines = [f"{method} {url} RTSP/1.0", f"CSeq: {cseq}", "User-Agent: gpuipc-rtsp-probe", *headers]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1").split("\r\n")
            hdrs = {}
            for line in head[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    hdrs[k.strip().lower()] = v.strip()
            n = int(hdrs.get("content-length", "0"))
            if len(buf) >= end + 4 + n:
                status = head[0].split(" ", 2)
                if len(status) < 2 or status[1] != "200":
                    sys.exit(f"rtsp-probe: {method} {url}: {head[0]}")
                return hdrs, buf[end + 4 + n:]
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit(f"rtsp-probe: {url} closed the connection during {method}")
        buf += chunk


class Stream:
    def __init__(self, url):
        self.url = url
        host, _, port = url.split("://", 1)[1].split("/", 1)[0].partition(":")
        self.sock = socket.create_connection((host, int(port or 554)), timeout=10)
        buf = b""
        _, buf = request(self.sock, buf, "DESCRIBE", url, 1, ["Accept: application/sdp"])
        hdrs, buf = request(self.sock, buf, "SETUP", url.rstrip("/") + "/trackID=0", 2,
                            ["Transport: RTP/AVP/TCP;unicast;interleaved=0-1"])
        self.session = hdrs.get("session", "").split(";")[0]
        self.buf = buf
        self.frames = []  # (arrival, unwrapped RTP time)
        self.last_ts = None
        self.ts_hi = 0

    def play(self):
        _, self.buf = request(self.sock, self.buf, "PLAY", self.url, 3, [f"Session: {self.session}"])
        self.sock.setblocking(False)

    def feed(self, now, record):
        """Read what the socket holds; note each frame's end."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        buf = self.buf + chunk
        at, n = 0, len(buf)
        while at + 4 <= n:
            if buf[at] != 0x24:  # an RTSP message (a reply): skip to its end
                end = buf.find(b"\r\n\r\n", at)
                if end < 0:
                    break
                at = end + 4
                continue
            size = (buf[at + 2] << 8) | buf[at + 3]
            if at + 4 + size > n:
                break
            if buf[at + 1] == 0 and size >= 12 and buf[at + 5] & 0x80:
                ts = struct.unpack_from(">I", buf, at + 8)[0]
                if self.last_ts is not None and ts < self.last_ts and self.last_ts - ts > 1 << 31:
                    self.ts_hi += 1 << 32
                self.last_ts = ts
                if record:
                    self.frames.append((now, (self.ts_hi + ts) / 90000.0))
            at += 4 + size
        self.buf = buf[at:]
        return True


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("n", type=int)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--path", default="cam{k}")
    ap.add_argument("--late-ms", type=float, default=100.0)
    ap.add_argument("--per-stream", action="store_true")
    ap.add_argument("--stall-one", type=float, default=0.0, metavar="S",
                    help="stream 0 reads nothing for S seconds from the window's start (a stuck client: "
                         "do the other streams stall with it?)")
    args = ap.parse_args()
    streams = [Stream(args.base.rstrip("/") + "/" + args.path.format(k=k)) for k in range(args.n)]
    for s in streams:
        s.play()
    by_fd = {s.sock.fileno(): s for s in streams}
    poll = select.poll()
    for fd in by_fd:
        poll.register(fd, select.POLLIN)
    t_start = time.monotonic()
    t0 = t_start + args.warmup
    t1 = t0 + args.seconds
    cpu0 = None
    stuck = False
    while True:
        now = time.monotonic()
        if now >= t1:
            break
        if cpu0 is None and now >= t0:
            cpu0 = time.process_time()
        stalled = args.stall_one > 0 and t0 <= now < t0 + args.stall_one
        if stalled != stuck:
            stuck = stalled
            (poll.unregister if stuck else lambda fd: poll.register(fd, select.POLLIN))(streams[0].sock.fileno())
        for fd, _ in poll.poll(100):
            now = time.monotonic()
            if not by_fd[fd].feed(now, now >= t0):
                sys.exit(f"rtsp-probe: {by_fd[fd].url}: the server ended the stream")
    cpu = 100 * (time.process_time() - (cpu0 or 0)) / args.seconds
    late_s = args.late_ms / 1000
    rows, bins = [], {}
    for k, s in enumerate(streams):
        if not s.frames:
            rows.append((k, 0.0, float("nan"), float("nan"), 0))
            continue
        base = min(a - m for a, m in s.frames)
        late = [(a - m - base, a) for a, m in s.frames]
        lat = [x for x, _ in late]
        n_late = sum(1 for x in lat if x > late_s)
        for x, a in late:
            if x > late_s:
                b = int((a - t0) / 0.25)
                worst, who = bins.get(b, (0.0, set()))
                who.add(k)
                bins[b] = (max(worst, x), who)
        rows.append((k, len(s.frames) / args.seconds, max(lat) * 1000, pct(lat, 0.99) * 1000, n_late))
        if args.per_stream:
            print(f"  {k:3d} {rows[-1][1]:6.1f} fps  worst {rows[-1][2]:8.1f} ms  p99 {rows[-1][3]:7.1f} ms"
                  f"  late {n_late}")
    shared = 0
    for b in sorted(bins):
        worst, who = bins[b]
        if len(who) >= max(2, args.n // 4):
            shared += 1
            print(f"  at {b * 0.25:5.2f} s: {len(who):3d} streams late, worst {worst * 1000:7.1f} ms")
    print(f"probe N={args.n} frames/s min {min(r[1] for r in rows):.1f} late>{args.late_ms:.0f}ms "
          f"{sum(r[4] for r in rows)} worst {max(r[2] for r in rows):.1f} ms "
          f"p99 {max(r[3] for r in rows):.1f} ms shared-stalls {shared} probe-cpu {cpu:.0f} %")


if __name__ == "__main__":
    main()
