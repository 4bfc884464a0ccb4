//! The params the four bridge stages (tcp-send, tcp-receive, nccl-send, nccl-receive) share,
//! checked once here: a sender's `to` and a receiver's `listen` address, the `link` name, a
//! timeout, and a receiver's `format`, `width` and `height`: declared once ([`TO`], [`LISTEN`],
//! ...), checked once ([`sender_problems`], [`receiver_problems`]). Each answers a problem as
//! text, which the plugin turns into its error (or collects with others in `check`). The two
//! receivers read the same table, [`ReceiverParams`].

use std::net::SocketAddr;
use std::time::Duration;

use gpuipc_plugin_api::{Error, FrameFormat, FrameLayout, ParamInfo, PixelFormat};
use serde::Deserialize;

use crate::MAX_LINK_NAME;
use crate::receiver::ReceiverSetup;
use crate::sender::SenderSetup;

/// The `params` table of a receiver (tcp-receive, nccl-receive): [`LISTEN`],
/// [`RECEIVER_LINK`], [`FORMAT`], [`WIDTH`], [`HEIGHT`] and `reconnect_timeout_s` (each
/// receiver declares that one with its own words).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiverParams {
    pub listen: String,
    pub link: String,
    pub format: String,
    pub width: u32,
    pub height: u32,
    #[serde(default = "default_timeout")]
    pub reconnect_timeout_s: f64,
}

/// A receiver's `reconnect_timeout_s` by default, in seconds.
fn default_timeout() -> f64 {
    30.0
}

impl ReceiverParams {
    /// A receiver's `check`: every problem, in one error.
    pub fn check(&self) -> Result<(), Error> {
        let format = (self.format.as_str(), self.width, self.height);
        checked(receiver_problems(&self.listen, &self.link, format, ("reconnect_timeout_s", self.reconnect_timeout_s)))
    }

    /// The frame format the params name: a receiver's output.
    pub fn frame_format(&self) -> Result<FrameFormat, Error> {
        frame_format(&self.format, self.width, self.height).map_err(|p| Error::new(p.join("; ")))
    }

    /// What the receiver's session is told, for frames of `format` (the negotiated output).
    pub fn setup(self, format: FrameFormat) -> Result<ReceiverSetup, Error> {
        let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
        Ok(ReceiverSetup {
            listen: listen_address(&self.listen).map_err(Error::new)?,
            link: self.link,
            timeout: Duration::from_secs_f64(self.reconnect_timeout_s),
            format,
            frame_bytes: layout.total_bytes,
        })
    }
}

/// What a sender's session is told, from its params `to`, `link` and `connect_timeout_s`,
/// for frames of `format` (its input), with `window` frames in flight over `connections` TCP
/// connections.
pub fn sender_setup(
    to: &str,
    link: String,
    connect_timeout_s: f64,
    format: FrameFormat,
    window: usize,
    connections: usize,
) -> Result<SenderSetup, Error> {
    let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
    Ok(SenderSetup {
        to: to_address(to).map_err(Error::new)?,
        link,
        timeout: Duration::from_secs_f64(connect_timeout_s),
        format,
        frame_bytes: layout.total_bytes,
        window,
        connections,
    })
}

/// A sender's `to` param.
pub const TO: ParamInfo = ParamInfo {
    name: "to",
    kind: "string",
    default: ParamInfo::REQUIRED,
    range: "ADDRESS:PORT",
    description: "the receiver's address and port",
};

/// A sender's `link` param.
pub const SENDER_LINK: ParamInfo = ParamInfo {
    name: "link",
    kind: "string",
    default: ParamInfo::REQUIRED,
    range: "",
    description: "the link's name; the receiver must name the same",
};

/// A receiver's `listen` param.
pub const LISTEN: ParamInfo = ParamInfo {
    name: "listen",
    kind: "string",
    default: ParamInfo::REQUIRED,
    range: "ADDRESS:PORT",
    description: "the address and port to listen on",
};

/// A receiver's `link` param.
pub const RECEIVER_LINK: ParamInfo = ParamInfo {
    name: "link",
    kind: "string",
    default: ParamInfo::REQUIRED,
    range: "",
    description: "the link's name; the sender must name the same",
};

/// A receiver's `format`, `width` and `height` params.
pub const FORMAT: ParamInfo = ParamInfo {
    name: "format",
    kind: r#""rgb8" | "rgba8" | "gray8" | "i420" | "nv12" | "p010""#,
    default: ParamInfo::REQUIRED,
    range: "",
    description: "the frames' pixel format",
};
pub const WIDTH: ParamInfo = ParamInfo {
    name: "width",
    kind: "integer",
    default: ParamInfo::REQUIRED,
    range: "> 0",
    description: "frame width in pixels",
};
pub const HEIGHT: ParamInfo = ParamInfo {
    name: "height",
    kind: "integer",
    default: ParamInfo::REQUIRED,
    range: "> 0",
    description: "frame height in pixels",
};

/// Every problem with a sender's shared params: `to`, `link` and its timeout param `timeout`
/// (`(name, seconds)`).
pub fn sender_problems(to: &str, link: &str, timeout: (&str, f64)) -> Vec<String> {
    let mut problems: Vec<String> = to_address(to).err().into_iter().collect();
    problems.extend(link_problem(link));
    problems.extend(timeout_problem(timeout.0, timeout.1));
    problems
}

/// Every problem with a receiver's shared params: `listen`, `link`, the frame format and its
/// timeout param `timeout` (`(name, seconds)`).
pub fn receiver_problems(listen: &str, link: &str, format: (&str, u32, u32), timeout: (&str, f64)) -> Vec<String> {
    let mut problems: Vec<String> = listen_address(listen).err().into_iter().collect();
    problems.extend(link_problem(link));
    if let Err(more) = frame_format(format.0, format.1, format.2) {
        problems.extend(more);
    }
    problems.extend(timeout_problem(timeout.0, timeout.1));
    problems
}

/// A plugin's `check` answer: `Ok` without problems, else one error naming them all.
pub fn checked(problems: Vec<String>) -> Result<(), Error> {
    match problems.is_empty() {
        true => Ok(()),
        false => Err(Error::new(problems.join("; "))),
    }
}

/// A sender's `to` param as an address.
pub fn to_address(to: &str) -> Result<SocketAddr, String> {
    to.parse().map_err(|_| {
        format!(
            "param `to`: {to:?} is not ADDRESS:PORT (an IP address and a port, e.g. 10.0.0.2:7448 or [fd00::2]:7448)"
        )
    })
}

/// A receiver's `listen` param as an address.
pub fn listen_address(listen: &str) -> Result<SocketAddr, String> {
    listen.parse().map_err(|_| {
        format!(
            "param `listen`: {listen:?} is not ADDRESS:PORT (an IP address and a port, e.g. 0.0.0.0:7448 or [::]:7448)"
        )
    })
}

/// What is wrong with a `link` param, if anything (a hello carries at most [`MAX_LINK_NAME`]).
pub fn link_problem(link: &str) -> Option<String> {
    (link.is_empty() || link.len() > MAX_LINK_NAME).then(|| format!("param `link` must be 1 to {MAX_LINK_NAME} bytes"))
}

/// What is wrong with the timeout param `name` of `seconds`, if anything.
pub fn timeout_problem(name: &str, seconds: f64) -> Option<String> {
    (!(seconds.is_finite() && seconds > 0.0)).then(|| format!("param `{name}` must be > 0, got {seconds}"))
}

/// The frame format a receiver's `format`, `width` and `height` describe, or every problem
/// with them.
pub fn frame_format(format: &str, width: u32, height: u32) -> Result<FrameFormat, Vec<String>> {
    let mut problems = Vec::new();
    let pixel = PixelFormat::from_name(format);
    if pixel.is_none() {
        let names: Vec<&str> = PixelFormat::ALL.iter().map(|p| p.name()).collect();
        problems.push(format!("param `format`: unknown pixel format {format:?}; one of {}", names.join(", ")));
    }
    for (name, value) in [("width", width), ("height", height)] {
        if value == 0 {
            problems.push(format!("param `{name}` must be > 0"));
        }
    }
    match pixel {
        Some(pixel) if problems.is_empty() => {
            let format = FrameFormat::new(pixel, width, height);
            match FrameLayout::for_format(format) {
                Some(_) => Ok(format),
                None => Err(vec![format!("no frame layout for {format}")]),
            }
        }
        _ => Err(problems),
    }
}

/// A frame format as the two ends' messages name it: with what its bytes take on the wire (the
/// layout's whole size, padding included).
pub fn describe(format: FrameFormat, bytes: u64) -> String {
    format!("{format} ({bytes} bytes a frame)")
}
