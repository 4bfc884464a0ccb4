#!/usr/bin/env python3
"""A small RTSP server serving test patterns, for the rtsp source's tests and benchmark
(Debian: gir1.2-gst-rtsp-server-1.0, python3-gi, gstreamer1.0-plugins-ugly for x264,
gstreamer1.0-plugins-bad for x265 / rtph265pay where HEVC is asked for).

    rtsp-test-server.py [--port 0] [--mounts 1] [--size 320x240] [--rate 30] [--frames N]
                        [--codec h264|h265] [--user U --password P] [--record DIR]

Serves /cam0 .. /cam{mounts-1}. Each client gets its own pipeline (not shared), starting at
the pattern's frame 0: videotestsrc (is-live, so at the frame rate) -> x264enc with fixed
settings (one thread, no B-frames, a key frame every --gop frames) -> RTP. With --frames N
each stream ends after N frames. With --record DIR each client's stream is also written, as
the H.264/HEVC byte stream the encoder made, to DIR/camK-CLIENT.h264 (CLIENT counts from 0):
what the client was sent, to decode with ffmpeg and compare.

Prints `port P` on standard output once it listens (P the one the system chose for 0), then
`client K` for each PLAY. SIGUSR1 pauses every stream (the server stays up, sends nothing: a
stalled stream); SIGUSR2 resumes. SIGTERM/SIGINT end it.
"""
import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mounts", type=int, default=1)
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--rate", type=int, default=30)
    ap.add_argument("--frames", type=int, default=-1)
    ap.add_argument("--gop", type=int, default=30)
    ap.add_argument("--codec", choices=["h264", "h265"], default="h264")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--record")
    args = ap.parse_args()
    Gst.init(None)
    w, h = args.size.split("x")
    server = GstRtspServer.RTSPServer()
    server.set_service(str(args.port))
    if args.user:
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "user")
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, args.password or ""), token)
        server.set_auth(auth)
    if args.codec == "h264":
        enc = (f"x264enc tune=zerolatency speed-preset=ultrafast threads=1 bframes=0 key-int-max={args.gop} "
               "byte-stream=true ! video/x-h264,stream-format=byte-stream,alignment=au,profile=constrained-baseline")
        pay, ext = "rtph264pay config-interval=-1 pt=96", "h264"
    else:
        enc = (f"x265enc tune=zerolatency speed-preset=ultrafast key-int-max={args.gop} "
               "! video/x-h265,stream-format=byte-stream,alignment=au")
        pay, ext = "rtph265pay config-interval=-1 pt=96", "h265"
    mounts = server.get_mount_points()
    clients = [0]
    paused = []
    medias = []

    for k in range(args.mounts):
        factory = GstRtspServer.RTSPMediaFactory()
        src = (f"videotestsrc is-live=true pattern=smpte num-buffers={args.frames} ! "
               f"video/x-raw,format=I420,width={w},height={h},framerate={args.rate}/1 ! {enc}")
        factory.set_launch(f"( {src} ! tee name=t ! queue ! {pay} name=pay0 )")
        factory.set_shared(False)
        factory.set_eos_shutdown(False)
        if args.user:
            perm = GstRtspServer.RTSPPermissions()
            perm.add_permission_for_role("user", "media.factory.access", True)
            perm.add_permission_for_role("user", "media.factory.construct", True)
            factory.set_permissions(perm)

        def configured(_factory, media, k=k):
            medias.append(media)
            if args.record:
                tee = media.get_element().get_by_name("t")
                q = Gst.ElementFactory.make("queue")
                sink = Gst.ElementFactory.make("filesink")
                sink.set_property("location", f"{args.record}/cam{k}-{clients[0]}.{ext}")
                sink.set_property("async", False)
                bin_ = media.get_element()
                bin_.add(q)
                bin_.add(sink)
                q.link(sink)
                tee.link(q)
            print(f"client {clients[0]}", flush=True)
            clients[0] += 1

        factory.connect("media-configure", configured)
        mounts.add_factory(f"/cam{k}", factory)

    if server.attach(None) == 0:
        print("cannot listen", file=sys.stderr)
        sys.exit(1)
    print(f"port {server.get_bound_port()}", flush=True)
    loop = GLib.MainLoop()

    def pause(*_):
        for m in medias:
            m.get_element().set_state(Gst.State.PAUSED)
        paused.append(1)
        print("paused", flush=True)
        return True

    def resume(*_):
        for m in medias:
            m.get_element().set_state(Gst.State.PLAYING)
        print("resumed", flush=True)
        return True

    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGUSR1, pause)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGUSR2, resume)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    loop.run()


if __name__ == "__main__":
    main()
