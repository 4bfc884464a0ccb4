#!/usr/bin/env python3
"""An RTSP server in pure Python (standard library only, no GStreamer) serving an H.264 or HEVC
elementary stream file as live cameras, for the rtsp source's tests, its benchmark and the GPU
check (a machine with an NVIDIA GPU may have Python but neither GStreamer nor ffmpeg).

    rtsp-file-server.py FILE [--codec h264|h265] [--port 0] [--mounts 1] [--rate 30]
                             [--user U --password P] [--sr-interval 1.0] [--clock-offset 0]

FILE is an Annex B byte stream (ffmpeg's `-f h264` / `-f hevc`) without B-frames (each access
unit's RTP time is its place in decode order). Serves /cam0 .. /cam{mounts-1}; each client
gets its own stream from the file's first access unit, looped for ever, paced at --rate:
access unit k is sent at the client's start + k / rate, RTP time 90000 * k / rate (from a random
base). RTP over TCP interleaved (`RTP/AVP/TCP`) or UDP (`RTP/AVP`), single NAL unit packets and
fragmentation units (RFC 6184 FU-A, RFC 7798 FU), the SDP with sprop-parameter-sets (H.264) or
sprop-vps/sps/pps (HEVC), an RTCP sender report every --sr-interval seconds (the sender's wall
clock, for the source's `clock = "sender"`; --clock-offset S puts that clock S seconds off the
machine's, as a camera's may be). With --user, every request but OPTIONS needs
Basic authentication (a wrong one gets 401).

Prints `port P` on standard output once it listens (P the one the system chose for 0), then
`client K` for each PLAY (K counts from 0). SIGUSR1 pauses every stream (connections stay up,
nothing is sent: a stalled stream); SIGUSR2 resumes it where the wall clock is (frames of the
pause are skipped, as a camera's are). SIGTERM/SIGINT end it.
"""
import argparse
import base64
import os
import random
import signal
import socket
import struct
import sys
import threading
import time

# RTP payload bytes per packet at most: 1400 + headers stays under an Ethernet MTU.
MAX_PAYLOAD = 1400
NTP_EPOCH_OFFSET = 2208988800


def nal_units(data):
    """The NAL units of an Annex B byte stream, without start codes."""
    # A NAL unit ends in its RBSP's stop bit: zero bytes before a start code are not its own.
    out, start = [], -1
    while True:
        j = data.find(b"\x00\x00\x01", start + 3 if start >= 0 else 0)
        if start >= 0:
            out.append(data[start:j if j >= 0 else len(data)].rstrip(b"\x00"))
        if j < 0:
            return [u for u in out if u]
        start = j + 3


class Codec:
    def __init__(self, name):
        self.name = name
        self.h264 = name == "h264"

    def nal_type(self, nal):
        return nal[0] & 0x1F if self.h264 else (nal[0] >> 1) & 0x3F

    def is_vcl(self, t):
        return t in (1, 5) if self.h264 else t < 32

    def first_slice(self, nal):
        # H.264: first_mb_in_slice == 0 (ue(v) 0 is a single 1 bit); HEVC:
        # first_slice_segment_in_pic_flag.
        if self.h264:
            return len(nal) > 1 and nal[1] & 0x80 != 0
        return len(nal) > 2 and nal[2] & 0x80 != 0

    def starts_unit(self, t):
        # Non-VCL units that open an access unit: AUD, SEI, parameter sets (H.264 6-9; HEVC
        # VPS, SPS, PPS, AUD, prefix SEI).
        return t in (6, 7, 8, 9) if self.h264 else t in (32, 33, 34, 35, 39)

    def is_key(self, t):
        return t == 5 if self.h264 else 16 <= t <= 23

    def param_types(self):
        return {7: "sps", 8: "pps"} if self.h264 else {32: "vps", 33: "sps", 34: "pps"}


def access_units(nals, codec):
    """Group NAL units into access units (lists of NAL units)."""
    units, cur, has_vcl = [], [], False
    for nal in nals:
        t = codec.nal_type(nal)
        new = has_vcl and (codec.starts_unit(t) or (codec.is_vcl(t) and codec.first_slice(nal)))
        if new:
            units.append(cur)
            cur, has_vcl = [], False
        cur.append(nal)
        has_vcl = has_vcl or codec.is_vcl(t)
    if cur and has_vcl:
        units.append(cur)
    return units


def fragments(nal, codec):
    """The RTP payloads of one NAL unit: itself, or fragmentation units."""
    if len(nal) <= MAX_PAYLOAD:
        return [nal]
    out = []
    if codec.h264:
        indicator = bytes([(nal[0] & 0xE0) | 28])
        t = nal[0] & 0x1F
        body, head = nal[1:], 1
    else:
        t = (nal[0] >> 1) & 0x3F
        indicator = bytes([(nal[0] & 0x81) | (49 << 1), nal[1]])
        body, head = nal[2:], 2
    step = MAX_PAYLOAD - head - 1
    for off in range(0, len(body), step):
        s = 0x80 if off == 0 else 0
        e = 0x40 if off + step >= len(body) else 0
        out.append(indicator + bytes([s | e | t]) + body[off:off + step])
    return out


class Stream:
    """The file, parsed once: its access units as RTP payloads, its parameter sets."""

    def __init__(self, path, codec):
        with open(path, "rb") as f:
            data = f.read()
        self.codec = codec
        units = access_units(nal_units(data), codec)
        if not units:
            sys.exit(f"rtsp-file-server: {path} holds no {codec.name} access unit")
        self.params = {}
        kinds = codec.param_types()
        for unit in units:
            for nal in unit:
                kind = kinds.get(codec.nal_type(nal))
                if kind and kind not in self.params:
                    self.params[kind] = nal
        missing = [k for k in kinds.values() if k not in self.params]
        if missing:
            sys.exit(f"rtsp-file-server: {path} has no {', '.join(missing)}")
        first_types = {codec.nal_type(n) for n in units[0]}
        if not any(codec.is_key(t) for t in first_types):
            sys.exit(f"rtsp-file-server: {path} does not begin with a key frame")
        # Each key frame carries the parameter sets (a client joining or a loop starting needs
        # them); each access unit becomes its packets' payloads, the last one marked.
        self.payloads = []
        for unit in units:
            types = [codec.nal_type(n) for n in unit]
            if any(codec.is_key(t) for t in types) and not any(t in kinds for t in types):
                unit = [self.params[k] for k in kinds.values()] + unit
            self.payloads.append([p for nal in unit for p in fragments(nal, codec)])

    def sdp_fmtp(self):
        b64 = lambda nal: base64.b64encode(nal).decode()  # noqa: E731
        if self.codec.h264:
            sps = self.params["sps"]
            return (f"packetization-mode=1;profile-level-id={sps[1:4].hex().upper()};"
                    f"sprop-parameter-sets={b64(sps)},{b64(self.params['pps'])}")
        return f"sprop-vps={b64(self.params['vps'])};sprop-sps={b64(self.params['sps'])};sprop-pps={b64(self.params['pps'])}"


def udp_pair():
    """Two UDP sockets on an even port and the next one (RTP and RTCP, RFC 3550)."""
    for _ in range(100):
        rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rtp.bind(("0.0.0.0", 0))
        port = rtp.getsockname()[1]
        if port % 2 == 0 and port < 65535:
            rtcp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                rtcp.bind(("0.0.0.0", port + 1))
                return rtp, rtcp
            except OSError:
                rtcp.close()
        rtp.close()
    raise OSError("no pair of free UDP ports")


def say(line):
    """A line on standard output; one nobody reads any more does not stop the streams."""
    try:
        print(line, flush=True)
    except OSError:
        pass


class Server:
    def __init__(self, args, stream):
        self.args = args
        self.stream = stream
        self.clients = 0
        self.lock = threading.Lock()
        self.paused = threading.Event()
        self.resumed = threading.Condition()

    def next_client(self):
        with self.lock:
            k = self.clients
            self.clients += 1
        say(f"client {k}")


class Connection:
    """One RTSP connection: its requests on this thread, its stream on another once PLAYed."""

    def __init__(self, server, sock, peer):
        self.server, self.sock, self.peer = server, sock, peer
        self.send_lock = threading.Lock()
        self.session = f"{random.getrandbits(48):012x}"
        self.ssrc = random.getrandbits(32)
        self.seq = random.getrandbits(16)
        self.ts0 = random.getrandbits(32)
        self.tcp = True
        self.channels = (0, 1)
        self.udp = None
        self.playing = None
        self.closed = threading.Event()
        self.mount = None

    def send(self, data):
        with self.send_lock:
            self.sock.sendall(data)

    def reply(self, cseq, status="200 OK", headers=(), body=b""):
        lines = [f"RTSP/1.0 {status}", f"CSeq: {cseq}", "Server: gpuipc-rtsp-file-server"]
        lines += list(headers)
        if body:
            lines.append(f"Content-Length: {len(body)}")
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def authorized(self, headers):
        a = self.server.args
        if a.user is None:
            return True
        want = "Basic " + base64.b64encode(f"{a.user}:{a.password or ''}".encode()).decode()
        return headers.get("authorization", "") == want

    def mount_of(self, url):
        path = url.split("://", 1)[-1]
        path = "/" + path.split("/", 1)[1] if "/" in path else "/"
        name = path.strip("/").split("/")[0]
        if name.startswith("cam") and name[3:].isdigit() and int(name[3:]) < self.server.args.mounts:
            return name
        return None

    def serve(self):
        buf = b""
        try:
            while not self.closed.is_set():
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while True:
                    if buf[:1] == b"$":
                        # RTCP from the client (receiver reports) on the interleaved channel.
                        if len(buf) < 4:
                            break
                        n = struct.unpack(">H", buf[2:4])[0]
                        if len(buf) < 4 + n:
                            break
                        buf = buf[4 + n:]
                        continue
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head = buf[:end].decode("latin-1").split("\r\n")
                    headers = {}
                    for line in head[1:]:
                        if ":" in line:
                            k, v = line.split(":", 1)
                            headers[k.strip().lower()] = v.strip()
                    n = int(headers.get("content-length", "0"))
                    if len(buf) < end + 4 + n:
                        break
                    buf = buf[end + 4 + n:]
                    self.request(head[0], headers)
        except OSError:
            pass
        finally:
            self.close()

    def request(self, line, headers):
        parts = line.split()
        if len(parts) != 3:
            return
        method, url, _ = parts
        cseq = headers.get("cseq", "0")
        if method == "OPTIONS":
            return self.reply(cseq, headers=["Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER"])
        if not self.authorized(headers):
            return self.reply(cseq, "401 Unauthorized", ['WWW-Authenticate: Basic realm="gpuipc"'])
        mount = self.mount_of(url)
        if method in ("DESCRIBE", "SETUP") and mount is None:
            return self.reply(cseq, "404 Not Found")
        if method == "DESCRIBE":
            return self.describe(cseq, url)
        if method == "SETUP":
            return self.setup(cseq, headers, mount)
        if method == "PLAY":
            if self.mount is None:
                return self.reply(cseq, "455 Method Not Valid in This State")
            self.reply(cseq, headers=[f"Session: {self.session}", "Range: npt=0.000-",
                                      f"RTP-Info: url={url.rstrip('/')}/trackID=0;seq={self.seq};rtptime={self.ts0}"])
            if self.playing is None:
                self.server.next_client()
                self.playing = threading.Thread(target=self.play, daemon=True)
                self.playing.start()
            return None
        if method == "TEARDOWN":
            self.reply(cseq, headers=[f"Session: {self.session}"])
            return self.close()
        if method == "GET_PARAMETER":
            return self.reply(cseq, headers=[f"Session: {self.session}"])
        return self.reply(cseq, "405 Method Not Allowed")

    def describe(self, cseq, url):
        codec = self.server.stream.codec
        name = "H264" if codec.h264 else "H265"
        host = self.sock.getsockname()[0]
        sdp = "\r\n".join([
            "v=0",
            f"o=- {self.session} 1 IN IP4 {host}",
            "s=gpuipc rtsp-file-server",
            f"c=IN IP4 {host}",
            "t=0 0",
            "a=control:*",
            "m=video 0 RTP/AVP 96",
            f"a=rtpmap:96 {name}/90000",
            f"a=fmtp:96 {self.server.stream.sdp_fmtp()}",
            f"a=framerate:{self.server.args.rate}",
            "a=control:trackID=0",
            "",
        ]).encode()
        base = url.rstrip("/") + "/"
        self.reply(cseq, headers=["Content-Type: application/sdp", f"Content-Base: {base}"], body=sdp)

    def setup(self, cseq, headers, mount):
        transport = headers.get("transport", "")
        fields = dict(f.split("=", 1) if "=" in f else (f, "") for f in transport.split(";"))
        if "RTP/AVP/TCP" in transport:
            self.tcp = True
            if "interleaved" in fields:
                a, _, b = fields["interleaved"].partition("-")
                self.channels = (int(a), int(b or int(a) + 1))
            reply = f"RTP/AVP/TCP;unicast;interleaved={self.channels[0]}-{self.channels[1]};ssrc={self.ssrc:08X}"
        elif "client_port" in fields:
            self.tcp = False
            a, _, b = fields["client_port"].partition("-")
            client = (int(a), int(b or int(a) + 1))
            rtp, rtcp = udp_pair()
            self.udp = (rtp, rtcp, (self.peer[0], client[0]), (self.peer[0], client[1]))
            ports = f"{rtp.getsockname()[1]}-{rtcp.getsockname()[1]}"
            reply = f"RTP/AVP;unicast;client_port={client[0]}-{client[1]};server_port={ports};ssrc={self.ssrc:08X}"
        else:
            return self.reply(cseq, "461 Unsupported Transport")
        self.mount = mount
        self.reply(cseq, headers=[f"Transport: {reply}", f"Session: {self.session};timeout=60"])

    def rtp(self, payload, marker, ts):
        header = struct.pack(">BBHII", 0x80, (0x80 if marker else 0) | 96, self.seq, ts, self.ssrc)
        self.seq = (self.seq + 1) & 0xFFFF
        self.octets += len(payload)
        self.packets += 1
        return header + payload

    def sender_report(self, ts):
        now = time.time() + self.server.args.clock_offset + NTP_EPOCH_OFFSET
        ntp = (int(now) << 32) | int((now % 1) * (1 << 32))
        return struct.pack(">BBHIQIII", 0x80, 200, 6, self.ssrc, ntp, ts & 0xFFFFFFFF,
                           self.packets & 0xFFFFFFFF, self.octets & 0xFFFFFFFF)

    def emit(self, packets, rtcp=False):
        if self.tcp:
            ch = self.channels[1] if rtcp else self.channels[0]
            self.send(b"".join(b"$" + bytes([ch]) + struct.pack(">H", len(p)) + p for p in packets))
        else:
            rtp, rtcp_sock, to_rtp, to_rtcp = self.udp
            for p in packets:
                (rtcp_sock if rtcp else rtp).sendto(p, to_rtcp if rtcp else to_rtp)

    def play(self):
        server, stream, rate = self.server, self.server.stream, self.server.args.rate
        self.packets = self.octets = 0
        units = stream.payloads
        start = time.monotonic()
        k = 0
        next_sr = start
        try:
            while not self.closed.is_set():
                if server.paused.is_set():
                    with server.resumed:
                        server.resumed.wait_for(lambda: not server.paused.is_set() or self.closed.is_set())
                    # The camera's clock ran meanwhile: go on at the frame due now.
                    k = max(k, int((time.monotonic() - start) * rate))
                    continue
                due = start + k / rate
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                    continue
                if now >= next_sr:
                    # Before the frame: a client has the sender's clock from its first frame.
                    sr_ts = (self.ts0 + round((now - start) * 90000)) & 0xFFFFFFFF
                    self.emit([self.sender_report(sr_ts)], rtcp=True)
                    next_sr = now + server.args.sr_interval
                ts = (self.ts0 + round(k * 90000 / rate)) & 0xFFFFFFFF
                payloads = units[k % len(units)]
                last = len(payloads) - 1
                self.emit([self.rtp(p, i == last, ts) for i, p in enumerate(payloads)])
                k += 1
        except OSError:
            pass
        finally:
            self.close()

    def close(self):
        if self.closed.is_set():
            return
        self.closed.set()
        with self.server.resumed:
            self.server.resumed.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.udp:
            self.udp[0].close()
            self.udp[1].close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--codec", choices=["h264", "h265"])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mounts", type=int, default=1)
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--sr-interval", type=float, default=1.0)
    ap.add_argument("--clock-offset", type=float, default=0.0,
                    help="seconds added to the wall clock the sender reports give (a camera's clock off)")
    args = ap.parse_args()
    codec = args.codec
    if codec is None:
        ext = os.path.splitext(args.file)[1].lower()
        codec = {".h264": "h264", ".264": "h264", ".h265": "h265", ".265": "h265", ".hevc": "h265"}.get(ext)
        if codec is None:
            sys.exit(f"rtsp-file-server: cannot tell the codec of {args.file} from its name: give --codec")
    server = Server(args, Stream(args.file, Codec(codec)))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", args.port))
    listener.listen(64)

    def pause(*_):
        server.paused.set()
        say("paused")

    def resume(*_):
        with server.resumed:
            server.paused.clear()
            server.resumed.notify_all()
        say("resumed")

    def end(*_):
        raise SystemExit(0)

    signal.signal(signal.SIGUSR1, pause)
    signal.signal(signal.SIGUSR2, resume)
    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    print(f"port {listener.getsockname()[1]}", flush=True)
    while True:
        sock, peer = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(server, sock, peer)
        threading.Thread(target=conn.serve, daemon=True).start()


if __name__ == "__main__":
    main()
