//! Stages on several machines (docs/multi-host.md): the `[[host]]` tables checked, each stage's
//! host, and the links that cross from one host to another, with the frames a second each
//! one's network link can carry.

use toml::Spanned;

use crate::config::{Diagnostics, HostSection, SourceFile, StageSection};

/// A machine stages run on, reached through its agent.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPlan {
    pub name: String,
    /// The agent's Zenoh endpoint, `tcp/10.0.0.3:7447`.
    pub control: String,
    /// Where frames for its stages are sent, `ADDRESS:PORT`.
    pub data: String,
    /// The network link's speed, Gb/s, where the file gives it.
    pub link_gbps: Option<f64>,
}

/// Zenoh's link protocols an agent can listen on: those this build of Zenoh carries (TCP; TLS
/// and QUIC would bring their own crypto crates).
const PROTOCOLS: [&str; 1] = ["tcp"];

/// The `[[host]]` tables, checked: names (the stage-name rules, once each, not `local`),
/// control endpoints (`tcp/ADDRESS:PORT`, once each), data addresses, link speeds.
pub fn plan_hosts(source: &SourceFile, hosts: &[Spanned<HostSection>], diags: &mut Diagnostics) -> Vec<HostPlan> {
    let mut planned: Vec<HostPlan> = Vec::new();
    for host in hosts {
        let h = host.get_ref();
        let name = h.name.get_ref();
        if crate::config::StageName::parse(name).is_err() || name == "local" {
            diags.error_at(source, h.name.span(), format!("host name `{name}`: use letters, digits, `-` and `_`, starting with a letter (and not `local`, which means the machine `run` starts on)"));
        } else if planned.iter().any(|p| &p.name == name) {
            diags.error_at(source, h.name.span(), format!("host `{name}` is declared twice"));
        }
        let control = h.control.get_ref();
        let address = match endpoint(control) {
            Ok(address) => address,
            Err(why) => {
                diags.error_at(source, h.control.span(), format!("host `{name}`: control endpoint `{control}`: {why}"));
                continue;
            }
        };
        if let Some(other) = planned.iter().find(|p| &p.control == control) {
            diags.error_at(
                source,
                h.control.span(),
                format!("host `{name}`: control endpoint `{control}` is host `{}`'s too", other.name),
            );
        }
        let data = match &h.data {
            Some(d) => match split_address(d.get_ref()) {
                Ok(_) => d.get_ref().clone(),
                Err(why) => {
                    diags.error_at(source, d.span(), format!("host `{name}`: data address `{}`: {why}", d.get_ref()));
                    continue;
                }
            },
            None => match address.1.checked_add(1) {
                Some(port) => format!("{}:{port}", address.0),
                None => {
                    diags.error_at(
                        source,
                        h.control.span(),
                        format!("host `{name}`: control port 65535 leaves no next port for frames; give `data`"),
                    );
                    continue;
                }
            },
        };
        if let Some(speed) = &h.link_gbps
            && !(speed.get_ref().is_finite() && *speed.get_ref() > 0.0)
        {
            diags.error_at(
                source,
                speed.span(),
                format!("host `{name}`: link_gbps must be a positive number of gigabits a second"),
            );
        }
        planned.push(HostPlan {
            name: name.clone(),
            control: control.clone(),
            data,
            link_gbps: h.link_gbps.as_ref().map(|s| *s.get_ref()),
        });
    }
    planned
}

/// The address and port of a `PROTOCOL/ADDRESS:PORT` endpoint.
fn endpoint(text: &str) -> Result<(String, u16), String> {
    let (protocol, address) =
        text.split_once('/').ok_or("expected `PROTOCOL/ADDRESS:PORT`, e.g. `tcp/10.0.0.3:7447`")?;
    if !PROTOCOLS.contains(&protocol) {
        return Err(format!("protocol `{protocol}`: one of {}", PROTOCOLS.join(", ")));
    }
    split_address(address)
}

/// `ADDRESS:PORT`, an IPv6 address in brackets.
fn split_address(text: &str) -> Result<(String, u16), String> {
    let (address, port) = text.rsplit_once(':').ok_or("expected `ADDRESS:PORT`")?;
    let port: u16 = port.parse().map_err(|_| format!("port `{port}`: a number from 1 to 65535"))?;
    let bare = address.trim_start_matches('[').trim_end_matches(']');
    if port == 0 || bare.is_empty() || bare.contains(char::is_whitespace) {
        return Err("expected `ADDRESS:PORT` with a port from 1 to 65535".into());
    }
    if address.starts_with('[') != address.ends_with(']') || (!address.starts_with('[') && bare.contains(':')) {
        return Err("an IPv6 address goes in brackets: `[fd00::3]:7447`".into());
    }
    Ok((address.to_owned(), port))
}

/// The host a stage runs on: `None` for the machine `run` starts on; `Err(())` when its `host`
/// names no `[[host]]` (reported).
pub fn stage_host(
    source: &SourceFile,
    stage: &StageSection,
    name: &str,
    hosts: &[HostPlan],
    diags: &mut Diagnostics,
) -> Result<Option<usize>, ()> {
    let Some(host) = &stage.host else { return Ok(None) };
    let wanted = host.get_ref();
    if wanted == "local" {
        return Ok(None);
    }
    match hosts.iter().position(|h| &h.name == wanted) {
        Some(i) => Ok(Some(i)),
        None => {
            let declared: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
            let known = if declared.is_empty() {
                "none is declared (a [[host]] table each)".to_owned()
            } else {
                format!("declared: {}", declared.join(", "))
            };
            diags.error_at(source, host.span(), format!("stage '{name}': host `{wanted}` is not a [[host]]; {known}"));
            Err(())
        }
    }
}

/// Frames a second that `gbps` carries of frames of `bytes` bytes.
pub fn frames_per_second(gbps: f64, bytes: u64) -> f64 {
    gbps * 1e9 / 8.0 / bytes as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_take_zenoh_s_form() {
        assert_eq!(endpoint("tcp/10.0.0.3:7447"), Ok(("10.0.0.3".into(), 7447)));
        assert_eq!(endpoint("tcp/[fd00::3]:7447"), Ok(("[fd00::3]".into(), 7447)));
        assert_eq!(endpoint("tcp/gpu-box.lan:7447"), Ok(("gpu-box.lan".into(), 7447)));
        assert!(endpoint("10.0.0.3:7447").unwrap_err().contains("PROTOCOL/ADDRESS:PORT"));
        assert!(endpoint("quic/10.0.0.3:80").unwrap_err().contains("protocol `quic`: one of tcp"));
        assert!(endpoint("tcp/10.0.0.3:70000").unwrap_err().contains("port `70000`"));
        assert!(endpoint("tcp/fd00::3:7447").unwrap_err().contains("brackets"));
        assert!(endpoint("tcp/:7447").is_err());
    }

    #[test]
    fn a_link_speed_bounds_frames_a_second() {
        // 4K RGB8 (24,883,200 bytes) over 25 Gb/s: 125.6 frames a second.
        assert!((frames_per_second(25.0, 24_883_200) - 125.59).abs() < 0.01);
    }
}
