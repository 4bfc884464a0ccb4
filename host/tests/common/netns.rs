//! Two network namespaces joined by a veth pair, for runs over two "hosts" on one machine;
//! removed when dropped, whatever the test did. Needs root and `ip`: where either is missing a
//! test says so and is skipped, unless `GPUIPC_REQUIRE_NETNS` is set (CI), where it fails.

use std::process::Command;

/// One side: its namespace, its end of the veth and its address.
pub struct Side {
    pub ns: String,
    pub veth: String,
    pub address: String,
}

impl Side {
    /// `ip netns exec NS`: what runs a command in this side's namespace.
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", self.ns.as_str()]
    }

    /// The veth end's (rx, tx) byte counters.
    pub fn bytes(&self) -> (u64, u64) {
        let out = Command::new("ip").args(["-n", &self.ns, "-s", "-j", "link", "show", &self.veth]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let stats = &json[0]["stats64"];
        (stats["rx"]["bytes"].as_u64().unwrap(), stats["tx"]["bytes"].as_u64().unwrap())
    }

    /// `ip -n NS ARGS...`, which must succeed.
    pub fn ip(&self, args: &[&str]) {
        ip(&[&["-n", self.ns.as_str()], args].concat()).unwrap_or_else(|e| panic!("{e}"));
    }

    /// An HTTP GET of `path` from `at`, made from this side's namespace (a thread of this test
    /// moved into it, so the test reaches the namespace's loopback): status and body.
    pub fn get(&self, at: &str, path: &str) -> std::io::Result<(u16, String)> {
        let (ns, at, path) = (self.ns.clone(), at.to_owned(), path.to_owned());
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let fd = std::fs::File::open(format!("/run/netns/{ns}"))?;
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&fd),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            let timeout = std::time::Duration::from_secs(30);
            let address: std::net::SocketAddr = at.parse().map_err(std::io::Error::other)?;
            let mut stream = std::net::TcpStream::connect_timeout(&address, timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            write!(stream, "GET {path} HTTP/1.0\r\nHost: {at}\r\n\r\n")?;
            let mut text = String::new();
            stream.read_to_string(&mut text)?;
            let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other(text.clone()))?;
            let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
            Ok((status.ok_or_else(|| std::io::Error::other(head.to_owned()))?, body.to_owned()))
        })
        .join()
        .expect("the GET's thread does not panic")
    }

    /// `tc` in this side's namespace, which must succeed.
    pub fn tc(&self, args: &[&str]) {
        let out = Command::new("ip").args(["netns", "exec", &self.ns, "tc"]).args(args).output().unwrap();
        assert!(out.status.success(), "tc {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Pair {
    /// Two namespaces named after this test process and `tag`, joined by a veth pair with
    /// 10.77.N.1/24 and 10.77.N.2/24 (N from `net`), both ends and loopback up; `None`, with the
    /// reason printed, where this machine cannot make them.
    pub fn create(tag: &str, net: u8) -> Option<Pair> {
        let why = if !rustix::process::geteuid().is_root() {
            Some("not root".to_owned())
        } else if Command::new("ip").arg("-V").output().is_err() {
            Some("no `ip` command (iproute2)".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return skip(&why);
        }
        let id = std::process::id();
        let side = |s: &str, host: u8| Side {
            ns: format!("gpuipc-{id}-{tag}-{s}"),
            // Interface names have at most 15 characters.
            veth: format!("gv{}{s}{net}", id % 100_000),
            address: format!("10.77.{net}.{host}"),
        };
        let pair = Pair { a: side("a", 1), b: side("b", 2) };
        let made = (|| {
            ip(&["netns", "add", &pair.a.ns])?;
            ip(&["netns", "add", &pair.b.ns])?;
            ip(&[
                "link",
                "add",
                &pair.a.veth,
                "netns",
                &pair.a.ns,
                "type",
                "veth",
                "peer",
                "name",
                &pair.b.veth,
                "netns",
                &pair.b.ns,
            ])?;
            for s in [&pair.a, &pair.b] {
                ip(&["-n", &s.ns, "addr", "add", &format!("{}/24", s.address), "dev", &s.veth])?;
                ip(&["-n", &s.ns, "link", "set", &s.veth, "up"])?;
                ip(&["-n", &s.ns, "link", "set", "lo", "up"])?;
            }
            Ok::<(), String>(())
        })();
        match made {
            Ok(()) => Some(pair),
            // Dropping `pair` removes what was made.
            Err(e) => skip(&format!("cannot make network namespaces: {e}")),
        }
    }
}

fn skip<T>(why: &str) -> Option<T> {
    assert!(std::env::var_os("GPUIPC_REQUIRE_NETNS").is_none(), "GPUIPC_REQUIRE_NETNS is set, but {why}");
    eprintln!("skipped: two network namespaces joined by veth are needed: {why}");
    None
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and so the pair.
        for s in [&self.a, &self.b] {
            let _ = ip(&["netns", "del", &s.ns]);
        }
    }
}
