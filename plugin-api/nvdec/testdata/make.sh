#!/bin/sh
# Makes the test clips and ffmpeg's own decodes of them (run from this folder; needs ffmpeg
# with libx264 and libx265, and python3). Debian 12's ffmpeg 5.1 made the committed files;
# another encoder version makes other bitstreams, so rerun it whole, never in part.
set -eu
q="-hide_banner -loglevel error -y"
# H.264 High, 66x38 (coded 80x48: cropping), 8 frames with 2 B-frames (reordering).
ffmpeg $q -f lavfi -i testsrc2=size=66x38:rate=25 -frames:v 8 -c:v libx264 -bf 2 -pix_fmt yuv420p h264-66x38.h264
ffmpeg $q -i h264-66x38.h264 -f rawvideo -pix_fmt nv12 h264-66x38.nv12
# Another size, for the format-change test.
ffmpeg $q -f lavfi -i testsrc2=size=34x18:rate=25 -frames:v 2 -c:v libx264 -pix_fmt yuv420p h264-34x18.h264
# HEVC Main 10, 146x146 (coded 152x152), 6 frames with B-frames; NVDEC's HEVC minimum is
# 144x144. Its p010 decode is 384 KB, so only a hash of each plane of each frame is kept.
ffmpeg $q -f lavfi -i testsrc2=size=146x146:rate=25 -frames:v 6 -c:v libx265 -x265-params bframes=2:log-level=error \
    -pix_fmt yuv420p10le hevc10-146x146.hevc
ffmpeg $q -i hevc10-146x146.hevc -f rawvideo -pix_fmt p010le /tmp/hevc10-146x146.p010
python3 - /tmp/hevc10-146x146.p010 146 146 2 > hevc10-146x146.p010.fnv <<'PY'
import sys
path, w, h, bps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def fnv1a64(data):
    x = 0xcbf29ce484222325
    for b in data:
        x = ((x ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return x
luma, chroma = w * bps * h, (w + 1) // 2 * 2 * bps * ((h + 1) // 2)
data = open(path, "rb").read()
assert len(data) % (luma + chroma) == 0
print("# FNV-1a 64 of ffmpeg's p010le decode of hevc10-146x146.hevc: frame, luma, chroma (testdata/make.sh)")
for i in range(len(data) // (luma + chroma)):
    f = data[i * (luma + chroma):(i + 1) * (luma + chroma)]
    print(f"{i} {fnv1a64(f[:luma]):016x} {fnv1a64(f[luma:]):016x}")
PY
rm /tmp/hevc10-146x146.p010
# Where each access unit starts (decode order) and which is shown when (display order):
# ffmpeg's parser's packet positions, and its frames' packet positions in display order.
for f in h264-66x38.h264 hevc10-146x146.hevc; do
    echo "$f packets: $(ffprobe -v error -show_packets -show_entries packet=pos -of csv=p=0 $f | tr '\n' ' ')"
    echo "$f display: $(ffprobe -v error -show_frames -show_entries frame=pkt_pos -of csv=p=0 $f | cut -d, -f1 | grep . | tr '\n' ' ')"
done
