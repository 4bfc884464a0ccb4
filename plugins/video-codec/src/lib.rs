//! The decoding side of gpuipc's video sources, shared by `video` (files) and `rtsp` (live
//! cameras): what a stream holds ([`container`]: MP4/MOV and Annex B elementary streams, access
//! units, parameter sets) and the two decoders ([`decode`]: ffmpeg in the cpu domain, NVDEC in
//! the cuda domain), each fed access units and giving display frames into the ring's slots.
#![deny(unsafe_code)]

pub mod container;
pub mod decode;
