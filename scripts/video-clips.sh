#!/usr/bin/env bash
# Make the video clips the GPU checks and the decode benchmark use, with ffmpeg (Debian's has
# every encoder needed: libx264, libx265, libsvtav1, libaom, libvpx):
#
#   scripts/video-clips.sh DIR            the correctness corpus: DIR/corpus/*
#   scripts/video-clips.sh DIR bench      and the benchmark clips: DIR/bench/*
#
# The corpus is the one host/tests/video.rs makes at test time: H.264 with and without
# B-frames (MP4, MOV, elementary stream), HEVC 8 and 10 bit (MP4, elementary stream), AV1 8
# and 10 bit, VP9, odd sizes, one frame. The benchmark clips are 1080p and 2160p H.264 and
# HEVC at the bit rates of ordinary camera and streaming video (8 and 25 Mb/s), looped by the
# benchmark.
set -euo pipefail
dir=${1:?usage: video-clips.sh DIR [bench]}
mkdir -p "$dir/corpus"
enc() {  # OUT W H RATE FRAMES ENCODER-ARGS...
    local out=$1 w=$2 h=$3 rate=$4 frames=$5
    shift 5
    [ -e "$out" ] && return
    ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "testsrc2=size=${w}x${h}:rate=$rate" \
        -frames:v "$frames" "$@" "$out"
}
x265=(-c:v libx265 -preset ultrafast -x265-params log-level=error)
c=$dir/corpus
enc "$c/h264-bframes.mp4" 642 362 30 24 -c:v libx264 -bf 3 -pix_fmt yuv420p
enc "$c/h264-baseline.mp4" 320 240 30 20 -c:v libx264 -profile:v baseline -pix_fmt yuv420p
enc "$c/h264-main.mov" 352 288 30 16 -c:v libx264 -profile:v main -bf 2 -pix_fmt yuv420p
enc "$c/h264-annexb.h264" 642 362 30 20 -c:v libx264 -bf 2 -pix_fmt yuv420p -f h264
enc "$c/hevc-8bit.mp4" 1918 1078 30 6 "${x265[@]}" -pix_fmt yuv420p
enc "$c/hevc-10bit.mp4" 642 362 30 16 "${x265[@]}" -pix_fmt yuv420p10le
enc "$c/hevc-annexb.hevc" 320 240 30 16 -c:v libx265 -preset ultrafast -x265-params log-level=error:bframes=3 -pix_fmt yuv420p -f hevc
enc "$c/av1.mp4" 642 362 30 10 -c:v libsvtav1 -preset 12 -svtav1-params verbosity=0 -pix_fmt yuv420p
enc "$c/av1-10bit.mp4" 320 240 30 8 -c:v libaom-av1 -cpu-used 8 -pix_fmt yuv420p10le
enc "$c/vp9.mp4" 642 362 30 12 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p
enc "$c/one-frame.mp4" 64 48 30 1 -c:v libx264 -pix_fmt yuv420p
enc "$c/long.mp4" 640 360 30 300 -c:v libx264 -bf 2 -g 60 -pix_fmt yuv420p
if [ "${2:-}" = bench ]; then
    b=$dir/bench
    mkdir -p "$b"
    enc "$b/h264-1080p.mp4" 1920 1080 30 150 -c:v libx264 -preset veryfast -bf 2 -b:v 8M -pix_fmt yuv420p
    enc "$b/hevc-1080p.mp4" 1920 1080 30 150 "${x265[@]}" -b:v 8M -pix_fmt yuv420p
    enc "$b/h264-2160p.mp4" 3840 2160 30 60 -c:v libx264 -preset veryfast -bf 2 -b:v 25M -pix_fmt yuv420p
    enc "$b/hevc-2160p.mp4" 3840 2160 30 60 "${x265[@]}" -b:v 25M -pix_fmt yuv420p
fi
du -sh "$dir"
