//! The ffmpeg side of the encode stage: the names ffmpeg knows our pixel formats by, and its
//! command line. Which program runs is `gpuipc_plugin_api::ffmpeg`'s to say.

pub use gpuipc_plugin_api::ffmpeg::Program;
use gpuipc_plugin_api::{FrameFormat, PixelFormat};

use crate::encode::Params;

/// ffmpeg's name (`-pix_fmt`) for frames of `format` with their planes packed, which is how
/// ffmpeg's rawvideo demuxer lays them out: planes one after another, rows without padding,
/// 4:2:0 chroma planes `ceil(w/2)` x `ceil(h/2)` (so odd sizes agree too), `p010`'s samples
/// little-endian u16 with the value in the high 10 bits, as `p010le`'s are.
pub fn pix_fmt(format: PixelFormat) -> &'static str {
    match format {
        PixelFormat::I420 => "yuv420p",
        PixelFormat::Nv12 => "nv12",
        PixelFormat::P010 => "p010le",
        PixelFormat::Rgb8 => "rgb24",
        PixelFormat::Rgba8 => "rgba",
        PixelFormat::Gray8 => "gray",
    }
}

/// ffmpeg's arguments for a stage with `params` fed frames of `input`: raw frames on standard
/// input at the stage's rate, then the encoder and its settings, the extra `options`, the
/// container and the output.
pub fn arguments(params: &Params, input: FrameFormat, pixel: PixelFormat) -> Vec<String> {
    let (fps, fps_den) = params.rate();
    let mut args: Vec<String> = [
        "-hide_banner",
        "-nostats",
        "-loglevel",
        "error",
        "-f",
        "rawvideo",
        "-pix_fmt",
        pix_fmt(pixel),
        "-s",
        &format!("{}x{}", input.width, input.height),
        "-framerate",
        &format!("{fps}/{fps_den}"),
        "-i",
        "-",
        "-c:v",
        &params.codec,
    ]
    .map(str::to_owned)
    .into();
    let mut pair = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            args.extend([flag.to_owned(), value]);
        }
    };
    pair("-b:v", params.bitrate.clone());
    pair("-crf", params.crf.map(|c| c.to_string()));
    pair("-preset", params.preset.clone());
    pair("-pix_fmt", params.pix_fmt.clone());
    args.extend(params.options.iter().cloned());
    if let Some(format) = &params.format {
        args.extend(["-f".to_owned(), format.clone()]);
    }
    args.push(if params.overwrite { "-y" } else { "-n" }.to_owned());
    args.push(params.path.clone());
    args
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;

    use super::*;
    use crate::encode::Encode;

    fn params(text: &str) -> Params {
        parse_params::<Encode>(text).unwrap()
    }

    #[test]
    fn the_defaults_make_h264_from_raw_frames_at_30_fps() {
        let args = arguments(
            &params("path = \"out/clip.mp4\""),
            FrameFormat::new(PixelFormat::I420, 640, 360),
            PixelFormat::I420,
        );
        assert_eq!(
            args.join(" "),
            "-hide_banner -nostats -loglevel error -f rawvideo -pix_fmt yuv420p -s 640x360 -framerate 30/1 -i - \
             -c:v libx264 -y out/clip.mp4"
        );
    }

    #[test]
    fn every_param_has_its_place() {
        let p = params(
            r#"
            path = "rtmp://live.example/app/key"
            codec = "libx265"
            format = "flv"
            fps = 30000
            fps_den = 1001
            bitrate = "4M"
            preset = "veryfast"
            pix_fmt = "yuv420p"
            options = ["-g", "60", "-tune", "zerolatency"]
            overwrite = false
            "#,
        );
        let args = arguments(&p, FrameFormat::new(PixelFormat::Rgb8, 1920, 1080), PixelFormat::Rgb8);
        assert_eq!(
            args.join(" "),
            "-hide_banner -nostats -loglevel error -f rawvideo -pix_fmt rgb24 -s 1920x1080 -framerate 30000/1001 -i - \
             -c:v libx265 -b:v 4M -preset veryfast -pix_fmt yuv420p -g 60 -tune zerolatency -f flv -n rtmp://live.example/app/key"
        );
        let p = params("path = \"a b.mkv\"\ncrf = 18\noptions = [\"-metadata\", \"title=two words\"]");
        let args = arguments(&p, FrameFormat::new(PixelFormat::Gray8, 2, 2), PixelFormat::Gray8);
        // Each argument stays one argument: no shell splits them.
        assert_eq!(&args[16..], ["-crf", "18", "-metadata", "title=two words", "-y", "a b.mkv"]);
    }

    #[test]
    fn our_formats_have_ffmpeg_names() {
        let names: Vec<_> = PixelFormat::ALL.into_iter().map(pix_fmt).collect();
        assert_eq!(names, ["rgb24", "rgba", "gray", "yuv420p", "nv12", "p010le"]);
    }
}
