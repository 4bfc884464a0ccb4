//! The HTTP endpoint (`tiny_http`, on a thread of its own): `/metrics` in Prometheus's text
//! format, `/healthz` (the host is alive) and `/readyz` (every stage runs and frames flow),
//! 200 or 503 with the reason as text. It binds before any stage starts, so a port in use or
//! an address this machine does not have is an error of the command, not of a running
//! pipeline; it answers from the latest [`Sample`](super::Sample) and stops with the run.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use super::{Board, exposition, health, readiness};
use crate::config::MetricsAddress;

/// Why the endpoint could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum MetricsBindError {
    #[error("metrics address {address}: cannot resolve `{host}`: {source}")]
    Resolve { address: String, host: String, source: std::io::Error },
    #[error(
        "metrics address {address}: port {port} is in use (another run's metrics, or another server: choose another with --metrics, or 0 for any free port)"
    )]
    InUse { address: String, port: u16 },
    #[error("metrics address {address}: cannot listen on {at}: {source}{hint}")]
    Bind { address: String, at: SocketAddr, source: std::io::Error, hint: &'static str },
    #[error("metrics address {address}: cannot serve HTTP: {why}")]
    Serve { address: String, why: String },
}

/// A running endpoint; [`Endpoint::stop`] (or drop) ends it.
pub struct Endpoint {
    server: Arc<tiny_http::Server>,
    address: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
    done: mpsc::Receiver<()>,
}

/// How long stopping waits for an answer being written (a scraper that reads slowly); the
/// thread is then left to the end of the process.
const STOP_WAIT: Duration = Duration::from_secs(2);

impl Endpoint {
    /// Listen on `address` and serve `board` until stopped.
    pub fn start(address: &MetricsAddress, board: Arc<Board>) -> Result<Endpoint, MetricsBindError> {
        let shown = address.to_string();
        let targets: Vec<SocketAddr> = (address.host.as_str(), address.port)
            .to_socket_addrs()
            .map_err(|source| MetricsBindError::Resolve { address: shown.clone(), host: address.host.clone(), source })?
            .collect();
        let mut last = None;
        let mut listener = None;
        for at in &targets {
            match TcpListener::bind(at) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    return Err(MetricsBindError::InUse { address: shown, port: address.port });
                }
                Err(e) => last = Some((*at, e)),
            }
        }
        let listener = match (listener, last) {
            (Some(l), _) => l,
            (None, Some((at, source))) => {
                let hint = match source.kind() {
                    std::io::ErrorKind::AddrNotAvailable => " (no interface of this machine has that address)",
                    std::io::ErrorKind::PermissionDenied => " (ports below 1024 need privileges)",
                    _ => "",
                };
                return Err(MetricsBindError::Bind { address: shown, at, source, hint });
            }
            (None, None) => {
                let source = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
                return Err(MetricsBindError::Resolve { address: shown, host: address.host.clone(), source });
            }
        };
        let bound = listener
            .local_addr()
            .map_err(|e| MetricsBindError::Serve { address: shown.clone(), why: e.to_string() })?;
        let server = tiny_http::Server::from_listener(listener, None)
            .map_err(|e| MetricsBindError::Serve { address: shown, why: e.to_string() })?;
        let server = Arc::new(server);
        let (tx, done) = mpsc::channel();
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".to_owned())
            .spawn(move || {
                serve(&serving, &board);
                let _ = tx.send(());
            })
            .map_err(|e| MetricsBindError::Serve { address: address.to_string(), why: e.to_string() })?;
        Ok(Endpoint { server, address: bound, thread: Some(thread), done })
    }

    /// Where to scrape it (the port chosen, for port 0), as the log says it: scripts and tests
    /// find the port in it.
    pub fn where_to_scrape(&self) -> String {
        format!("metrics on http://{}/metrics (and /healthz, /readyz)", self.address)
    }

    /// Stop answering: the listening socket closes (a scrape after this is refused). An
    /// answer being written gets a moment to finish; a scraper that does not read it is not
    /// waited for.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            if self.done.recv_timeout(STOP_WAIT).is_ok() {
                let _ = thread.join();
            } else {
                tracing::warn!("metrics: an answer was still being written after {STOP_WAIT:?}; not waited for");
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn serve(server: &tiny_http::Server, board: &Board) {
    // `recv` ends with an error once `unblock` is called.
    while let Ok(request) = server.recv() {
        let (status, content_type, body) = answer(request.method(), request.url(), board);
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
            .expect("a content type is a valid header");
        let response = tiny_http::Response::from_string(body).with_status_code(status).with_header(header);
        // A scraper gone before its answer is its own business.
        let _ = request.respond(response);
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The answer to a request: status, content type, body.
fn answer(method: &tiny_http::Method, url: &str, board: &Board) -> (u16, &'static str, String) {
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        return (405, TEXT, "only GET and HEAD\n".to_owned());
    }
    let path = url.split('?').next().unwrap_or("");
    let (sample, since_post) = board.latest();
    let verdict = |result: Result<(), String>, ok: &str| match result {
        Ok(()) => (200, TEXT, format!("{ok}\n")),
        Err(why) => (503, TEXT, format!("{why}\n")),
    };
    match path {
        "/metrics" => (200, exposition::CONTENT_TYPE, exposition::render(&sample)),
        "/healthz" => verdict(health(&sample, since_post), "ok"),
        "/readyz" => verdict(readiness(&sample), "ready"),
        "/" => (
            200,
            TEXT,
            format!(
                "gpuipc-host {}, run '{}' ({}): /metrics (Prometheus), /healthz, /readyz\n",
                env!("CARGO_PKG_VERSION"),
                sample.pipeline,
                sample.state.name()
            ),
        ),
        _ => (404, TEXT, format!("no {path} here: /metrics, /healthz, /readyz\n")),
    }
}
