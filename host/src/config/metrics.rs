//! Where a run serves its metrics and health endpoints: `run --metrics ADDR` or
//! `[pipeline] metrics` (docs/metrics.md). A port alone means this machine's loopback:
//! the endpoint is reachable from elsewhere only when an address says so (docs/security.md).

use std::fmt;

/// `HOST:PORT`, `[IPv6]:PORT` or `PORT`, checked; the host is resolved when it is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsAddress {
    /// An IP address or a host name; `127.0.0.1` when only a port was given.
    pub host: String,
    /// 0: any free port (the run logs the one it got).
    pub port: u16,
}

impl MetricsAddress {
    pub fn parse(text: &str) -> Result<MetricsAddress, String> {
        let bad = |why: &str| Err(format!("metrics address `{text}`: {why}"));
        let port_of = |p: &str| {
            p.parse::<u16>().map_err(|_| format!("metrics address `{text}`: `{p}` is not a port (0 to 65535)"))
        };
        if text.is_empty() {
            return bad("empty (give PORT, HOST:PORT or [IPv6]:PORT)");
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(MetricsAddress { host: "127.0.0.1".to_owned(), port: port_of(text)? });
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let Some((v6, port)) = rest.split_once("]:") else {
                return bad("an IPv6 address is written in brackets with a port, `[::1]:9464`");
            };
            if v6.parse::<std::net::Ipv6Addr>().is_err() {
                return bad(&format!("`{v6}` is not an IPv6 address"));
            }
            (v6, port)
        } else {
            let Some((host, port)) = text.rsplit_once(':') else {
                return bad("no port (give PORT, HOST:PORT or [IPv6]:PORT)");
            };
            if host.contains(':') {
                return bad("an IPv6 address is written in brackets, `[::1]:9464`");
            }
            (host, port)
        };
        let host_ok = !host.is_empty()
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
        if !host_ok {
            return bad(&format!("`{host}` is not a host name or IP address"));
        }
        Ok(MetricsAddress { host: host.to_owned(), port: port_of(port)? })
    }
}

impl fmt::Display for MetricsAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MetricsAddress;

    fn ok(text: &str) -> (String, u16) {
        let a = MetricsAddress::parse(text).unwrap();
        (a.host, a.port)
    }

    #[test]
    fn a_port_alone_is_loopback() {
        assert_eq!(ok("9464"), ("127.0.0.1".into(), 9464));
        assert_eq!(ok("0"), ("127.0.0.1".into(), 0));
    }

    #[test]
    fn hosts_addresses_and_ipv6_in_brackets() {
        assert_eq!(ok("0.0.0.0:9464"), ("0.0.0.0".into(), 9464));
        assert_eq!(ok("localhost:1"), ("localhost".into(), 1));
        assert_eq!(ok("[::1]:9464"), ("::1".into(), 9464));
        assert_eq!(MetricsAddress::parse("[::1]:9464").unwrap().to_string(), "[::1]:9464");
    }

    #[test]
    fn each_bad_address_says_what_is_wrong() {
        for (text, says) in [
            ("", "empty"),
            ("65536", "is not a port"),
            ("host", "no port"),
            ("host:http", "`http` is not a port"),
            ("::1:9464", "in brackets"),
            ("[::1]9464", "in brackets with a port"),
            ("[nope]:1", "not an IPv6 address"),
            ("a b:1", "not a host name"),
            (":9464", "not a host name"),
        ] {
            let e = MetricsAddress::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
