//! The metrics endpoint (`run --metrics`, docs/metrics.md) with real parts: real runs of
//! stage processes scraped over HTTP; the exposition checked by Prometheus's own `promtool`,
//! and scraped by a real Prometheus server whose HTTP API must agree with the run's report;
//! `/healthz` and `/readyz` through a stage's failure and its restart; bad addresses, a port
//! in use and scrapes during shutdown; and the Grafana dashboard in docs/ against what a run
//! exports. The Prometheus tests need Debian's `prometheus` package (`.ci/run` installs it
//! and sets GPUIPC_REQUIRE_PROMETHEUS=1, which makes its absence a failure).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// A generator, a stage of two replicas and a sink: endless unless `--frames` says.
const CHAIN: &str = r#"
[pipeline]
name = "watched"
device = "cpu"
{extra}

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 48, pattern = "bars", format = "gray8" }

[[stage]]
name = "stretch"
plugin = "rgb-process"
inputs = ["gen"]
replicas = 2
params = { contrast = 1.5 }

[[stage]]
name = "sink"
plugin = "null"
inputs = ["stretch"]
"#;

fn chain(dir: &Path, extra: &str) -> PathBuf {
    pipeline(dir, "p.toml", &CHAIN.replace("{extra}", extra))
}

/// A GET of `path` from `at`: the status and the body, or the error of connecting or reading.
fn get(at: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&at, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {at}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other(format!("no head: {text}")))?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other(format!("no status: {head}")))?;
    Ok((status, body.to_owned()))
}

fn get_ok(at: SocketAddr, path: &str) -> (u16, String) {
    get(at, path).unwrap_or_else(|e| panic!("GET {path} from {at}: {e}"))
}

/// Where a run started with `--metrics` serves, from its log line.
fn address_of(run: &mut Running) -> SocketAddr {
    run.wait_for_stderr("metrics on http://", RUN_TIMEOUT);
    let log = run.stderr_so_far();
    let at = log.split("metrics on http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap();
    at.parse().unwrap()
}

/// A scrape's samples: `name{labels}` → value, labels as written.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The families a scrape declares (`# TYPE name kind`): name → kind.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_owned(), kind.to_owned())
        })
        .collect()
}

/// The series of a stage process in the endpoint's labels.
fn stage_series(name: &str, report_row: &str) -> String {
    let (stage, replica) = report_row.split_once('#').unwrap_or((report_row, "0"));
    format!(r#"{name}{{pipeline="watched",host="local",stage="{stage}",replica="{replica}"}}"#)
}

/// Each count of each stage row of the report, as the endpoint names it: `(series, value)`.
fn report_counts(report: &serde_json::Value) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for row in report["stages"].as_array().unwrap() {
        let name = row["name"].as_str().unwrap();
        for (metric, field) in [
            ("gpuipc_stage_frames_total", "frames"),
            ("gpuipc_stage_dropped_frames_total", "dropped"),
            ("gpuipc_stage_lost_frames_total", "lost"),
            ("gpuipc_stage_restarts_total", "restarts"),
            ("gpuipc_stage_latency_seconds_count", "frames"),
            ("gpuipc_stage_process_seconds_count", "frames"),
        ] {
            out.push((stage_series(metric, name), row[field].as_f64().unwrap()));
        }
    }
    out
}

/// A run of `frames` frames that keeps serving its final figures until a stop signal: its
/// endpoint, once the report is written and the figures are final.
fn finished_run(dir: &Path, frames: &str) -> (Running, SocketAddr) {
    let file = chain(dir, "");
    let file = file.to_string_lossy();
    let mut run = start(
        dir,
        &[
            "run",
            &file,
            "--quiet",
            "--frames",
            frames,
            "--report",
            "report.json",
            "--metrics",
            "0",
            "--metrics-linger",
            "10m",
        ],
    );
    let at = address_of(&mut run);
    run.wait_for_stderr("serving the run's final metrics", RUN_TIMEOUT);
    (run, at)
}

#[test]
fn a_finished_run_serves_the_figures_of_its_report_and_ends_on_a_stop_signal() {
    let dir = scratch("metrics-finished");
    let (run, at) = finished_run(&dir, "300");
    let (status, text) = get_ok(at, "/metrics");
    assert_eq!(status, 200, "{text}");
    let got = samples(&text);
    for (series, want) in report_counts(&report(&dir)) {
        assert_eq!(got.get(&series), Some(&want), "{series} in:\n{text}");
    }
    assert_eq!(got[r#"gpuipc_run_state{pipeline="watched",state="finished"}"#], 1.0, "{text}");
    assert_eq!(got[r#"gpuipc_run_state{pipeline="watched",state="running"}"#], 0.0, "{text}");
    assert_eq!(got[&stage_series("gpuipc_stage_frames_total", "sink")], 300.0);
    // Every frame went through every link once: the queues are empty, the counts balance.
    let queued: Vec<_> = got.iter().filter(|(k, _)| k.starts_with("gpuipc_link_queued_frames")).collect();
    assert!(!queued.is_empty() && queued.iter().all(|(_, v)| **v == 0.0), "{queued:?}");
    // A histogram's buckets are cumulative, their last one is every frame.
    let inf =
        r#"gpuipc_stage_latency_seconds_bucket{pipeline="watched",host="local",stage="sink",replica="0",le="+Inf"}"#;
    assert_eq!(got[inf], 300.0, "{text}");
    // Alive, but not ready: the run is over.
    assert_eq!(get_ok(at, "/healthz"), (200, "ok\n".to_owned()));
    let (status, why) = get_ok(at, "/readyz");
    assert_eq!((status, why.as_str()), (503, "the run is finished\n"));
    assert_eq!(get_ok(at, "/nowhere").0, 404);
    run.signal(Signal::TERM);
    let done = run.finish(RUN_TIMEOUT);
    assert_eq!(done.status.code(), Some(0), "{}", done.output());
    assert!(get(at, "/metrics").is_err(), "the endpoint answers after its run ended");
}

#[test]
fn a_port_in_use_is_an_error_before_any_stage_starts() {
    let dir = scratch("metrics-port-in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let file = chain(&dir, "");
    let done = run(&dir, &["run", &file.to_string_lossy(), "--quiet", "--metrics", &port]);
    assert_eq!(done.status.code(), Some(1), "{}", done.output());
    assert!(
        done.stderr.contains(&format!("metrics address 127.0.0.1:{port}: port {port} is in use")),
        "{}",
        done.output()
    );
    assert!(!done.stderr.contains("stages ready"), "{}", done.output());
    assert_nothing_left(done.pid);
    // The same from the pipeline file.
    let file = chain(&dir, &format!("metrics = \"{port}\""));
    let done = run(&dir, &["run", &file.to_string_lossy(), "--quiet"]);
    assert_eq!(done.status.code(), Some(1), "{}", done.output());
    assert!(done.stderr.contains("is in use"), "{}", done.output());
}

#[test]
fn an_address_that_cannot_be_bound_or_read_is_a_clear_error() {
    let dir = scratch("metrics-bad-address");
    let file = chain(&dir, "");
    let file = file.to_string_lossy();
    // 192.0.2.1 is for documentation (RFC 5737): no interface has it.
    let done = run(&dir, &["run", &file, "--quiet", "--metrics", "192.0.2.1:9464"]);
    assert_eq!(done.status.code(), Some(1), "{}", done.output());
    assert!(
        done.stderr.contains("metrics address 192.0.2.1:9464: cannot listen on 192.0.2.1:9464")
            && done.stderr.contains("no interface of this machine has that address"),
        "{}",
        done.output()
    );
    assert_nothing_left(done.pid);
    let done = run(&dir, &["run", &file, "--quiet", "--metrics", "no-such-host.invalid:9464"]);
    assert_eq!(done.status.code(), Some(1), "{}", done.output());
    assert!(done.stderr.contains("cannot resolve `no-such-host.invalid`"), "{}", done.output());
    // Words that are no address at all: the command line's error (exit 2).
    let done = run(&dir, &["run", &file, "--quiet", "--metrics", "::1:9464"]);
    assert_eq!(done.status.code(), Some(2), "{}", done.output());
    assert!(done.stderr.contains("an IPv6 address is written in brackets"), "{}", done.output());
    let done = run(&dir, &["run", &file, "--quiet", "--metrics-linger", "5s"]);
    assert_eq!(done.status.code(), Some(2), "{}", done.output());
    assert!(done.stderr.contains("--metrics"), "{}", done.output());
}

/// Poll `path` every 20 ms until its status is `want`, at most `timeout`; `/healthz` must
/// answer 200 at every look meanwhile.
fn until_status(at: SocketAddr, path: &str, want: u16, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let (health, said) = get_ok(at, "/healthz");
        assert_eq!(health, 200, "/healthz said {said}");
        let (status, body) = get_ok(at, path);
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} never answered {want} within {timeout:?}; last: {status} {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn health_and_readiness_through_a_restart_and_a_failure() {
    let dir = scratch("metrics-health");
    // The restart waits 3 s after the kill: /readyz, looked at every 20 ms, sees it.
    let file = chain(&dir, "restart = \"on-failure\"\nrestart_backoff = \"3s\"");
    let file = file.to_string_lossy();
    let mut run = start(&dir, &["run", &file, "--quiet", "--metrics", "0"]);
    let at = address_of(&mut run);
    assert_eq!(until_status(at, "/readyz", 200, RUN_TIMEOUT), "ready\n");
    rustix::process::kill_process(pid_of(run.pid(), "sink"), Signal::KILL).unwrap();
    let why = until_status(at, "/readyz", 503, RUN_TIMEOUT);
    assert!(why.contains("stage 'sink' is not running"), "{why}");
    let (_, text) = get_ok(at, "/metrics");
    assert_eq!(samples(&text)[&stage_series("gpuipc_stage_up", "sink")], 0.0, "{text}");
    until_status(at, "/readyz", 200, RUN_TIMEOUT);
    let (_, text) = get_ok(at, "/metrics");
    let got = samples(&text);
    assert_eq!(got[&stage_series("gpuipc_stage_restarts_total", "sink")], 1.0, "{text}");
    assert_eq!(got[&stage_series("gpuipc_stage_up", "sink")], 1.0, "{text}");
    run.signal(Signal::INT);
    let done = run.finish(RUN_TIMEOUT);
    assert_eq!(done.status.code(), Some(0), "{}", done.output());

    // Without a restart the run fails; it stays alive, not ready, while it lingers.
    let file = chain(&dir, "");
    let file = file.to_string_lossy();
    let mut run = start(&dir, &["run", &file, "--quiet", "--metrics", "0", "--metrics-linger", "10m"]);
    let at = address_of(&mut run);
    until_status(at, "/readyz", 200, RUN_TIMEOUT);
    rustix::process::kill_process(pid_of(run.pid(), "sink"), Signal::KILL).unwrap();
    run.wait_for_stderr("serving the run's final metrics", RUN_TIMEOUT);
    assert_eq!(get_ok(at, "/readyz"), (503, "the run is failed\n".to_owned()));
    assert_eq!(get_ok(at, "/healthz"), (200, "ok\n".to_owned()));
    let (_, text) = get_ok(at, "/metrics");
    assert_eq!(samples(&text)[r#"gpuipc_run_state{pipeline="watched",state="failed"}"#], 1.0, "{text}");
    run.signal(Signal::TERM);
    let done = run.finish(RUN_TIMEOUT);
    assert_eq!(done.status.code(), Some(1), "{}", done.output());
    assert!(done.stdout.contains("stage 'sink' killed by SIGKILL"), "{}", done.output());
    assert_nothing_left(done.pid);
}

#[test]
fn scrapes_during_shutdown_get_an_answer_or_a_refusal_and_never_hold_the_run() {
    let dir = scratch("metrics-shutdown");
    let file = chain(&dir, "");
    let mut run = start(&dir, &["run", &file.to_string_lossy(), "--quiet", "--metrics", "0"]);
    let at = address_of(&mut run);
    until_status(at, "/readyz", 200, RUN_TIMEOUT);
    // Clients that never finish their request, or never read: the run must not wait for them.
    let silent = TcpStream::connect(at).unwrap();
    let mut half = TcpStream::connect(at).unwrap();
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
    let (answered, first_answers) = std::sync::mpsc::channel();
    let scrapers: Vec<_> = (0..4)
        .map(|_| {
            let answered = answered.clone();
            std::thread::spawn(move || {
                let mut answers = 0;
                loop {
                    if answers == 1 {
                        let _ = answered.send(());
                    }
                    match get(at, "/metrics") {
                        Ok((200, body)) => {
                            assert!(body.ends_with('\n') && body.contains("gpuipc_run_state"), "a torn answer: {body}");
                            answers += 1;
                        }
                        Ok((status, body)) => panic!("a scrape got {status}: {body}"),
                        // Refused or cut: the endpoint is gone.
                        Err(_) => return answers,
                    }
                }
            })
        })
        .collect();
    // Each scraper has had an answer: the stop signal comes while they scrape on.
    for _ in 0..scrapers.len() {
        first_answers.recv_timeout(RUN_TIMEOUT).unwrap();
    }
    run.signal(Signal::INT);
    let done = run.finish(RUN_TIMEOUT);
    assert_eq!(done.status.code(), Some(0), "{}", done.output());
    for scraper in scrapers {
        assert!(scraper.join().unwrap() > 0, "a scraper got no answer at all");
    }
    drop((silent, half));
    assert_nothing_left(done.pid);
}

/// Set to 1 where Prometheus must be there (CI): the tests that need its `prometheus` and
/// `promtool` then fail without them instead of saying they are skipped.
const REQUIRE_PROMETHEUS_ENV: &str = "GPUIPC_REQUIRE_PROMETHEUS";

fn prometheus_for_test(test: &str) -> bool {
    let works = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works("prometheus") && works("promtool") {
        return true;
    }
    if std::env::var(REQUIRE_PROMETHEUS_ENV).is_ok_and(|v| v == "1") {
        panic!(
            "{REQUIRE_PROMETHEUS_ENV}=1 but prometheus or promtool does not run (install Debian's prometheus package)"
        );
    }
    eprintln!(
        "skipped {test}: prometheus and promtool are not installed ({REQUIRE_PROMETHEUS_ENV}=1 makes this a failure)"
    );
    false
}

#[test]
fn promtool_finds_the_exposition_valid() {
    if !prometheus_for_test("promtool_finds_the_exposition_valid") {
        return;
    }
    let dir = scratch("metrics-promtool");
    let (run, at) = finished_run(&dir, "200");
    let (_, text) = get_ok(at, "/metrics");
    run.signal(Signal::TERM);
    run.finish(RUN_TIMEOUT);
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics:\n{said}\n--- the exposition\n{text}"
    );
}

/// A Prometheus server of the test's own, on a free port, its data in `dir`; killed when
/// dropped.
struct Prometheus {
    child: Child,
    at: SocketAddr,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        let port = free_ports(1);
        let config = dir.join("prometheus.yml");
        let scrape = format!(
            "global:\n  scrape_interval: 250ms\n  scrape_timeout: 200ms\nscrape_configs:\n  - job_name: gpuipc\n    static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(&config, scrape).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .stderr(std::fs::File::create(dir.join("prometheus.err")).unwrap())
            .spawn()
            .unwrap();
        let prometheus = Prometheus { child, at: format!("127.0.0.1:{port}").parse().unwrap() };
        wait_until(RUN_TIMEOUT, "Prometheus ready", || get(prometheus.at, "/-/ready").is_ok_and(|(s, _)| s == 200));
        prometheus
    }

    /// An instant query's result vector: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let encoded: String = promql
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (status, body) = get_ok(self.at, &format!("/api/v1/query?query={encoded}"));
        assert_eq!(status, 200, "{promql}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        json["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let labels =
                    r["metric"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()));
                (labels.collect(), r["value"][1].as_str().unwrap().parse().unwrap())
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_prometheus_server_scraping_a_run_agrees_with_its_report() {
    if !prometheus_for_test("a_prometheus_server_scraping_a_run_agrees_with_its_report") {
        return;
    }
    let dir = scratch("metrics-prometheus");
    let (run, at) = finished_run(&dir, "500");
    let prometheus = Prometheus::start(&dir, at);
    wait_until(RUN_TIMEOUT, "Prometheus's scrape of the finished run", || {
        prometheus.query(r#"gpuipc_run_state{state="finished"} == 1"#).len() == 1
    });
    let report = report(&dir);
    for (metric, field) in [
        ("gpuipc_stage_frames_total", "frames"),
        ("gpuipc_stage_dropped_frames_total", "dropped"),
        ("gpuipc_stage_lost_frames_total", "lost"),
        ("gpuipc_stage_restarts_total", "restarts"),
    ] {
        let got = prometheus.query(metric);
        assert_eq!(got.len(), report["stages"].as_array().unwrap().len(), "{metric}: {got:?}");
        for (labels, value) in got {
            assert_eq!((labels["job"].as_str(), labels["pipeline"].as_str()), ("gpuipc", "watched"));
            let name = match labels["stage"].as_str() {
                "stretch" => format!("stretch#{}", labels["replica"]),
                stage => stage.to_owned(),
            };
            assert_eq!(value, stage_row(&report, &name)[field].as_f64().unwrap(), "{metric} of {name}");
        }
    }
    // PromQL over the histograms: every frame the sink did was timed.
    let counted = prometheus.query(r#"sum(gpuipc_stage_latency_seconds_count{stage="sink"})"#);
    assert_eq!(counted[0].1, 500.0);
    drop(prometheus);
    run.signal(Signal::TERM);
    let done = run.finish(RUN_TIMEOUT);
    assert_eq!(done.status.code(), Some(0), "{}", done.output());
}

/// Every `expr` of every panel and variable of a Grafana dashboard, wherever it is nested.
fn queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(q)) => out.push(q.clone()),
                    _ => queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| queries(v, out)),
        _ => {}
    }
}

#[test]
fn every_query_of_the_grafana_dashboard_names_a_metric_a_run_exports() {
    let dir = scratch("metrics-dashboard");
    let (run, at) = finished_run(&dir, "50");
    let (_, text) = get_ok(at, "/metrics");
    run.signal(Signal::TERM);
    run.finish(RUN_TIMEOUT);
    let exported = families(&text);
    let path = repo_root().join("docs/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut all = Vec::new();
    queries(&dashboard, &mut all);
    let mut named = 0;
    for q in all.iter().filter(|q| q.contains("gpuipc_")) {
        for word in q.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("gpuipc_")) {
            // A histogram's series carry a suffix on its family's name.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s).filter(|f| exported.get(*f).is_some_and(|k| k == "histogram")))
                .unwrap_or(word);
            assert!(exported.contains_key(family), "the dashboard's query `{q}` names `{word}`, which no run exports");
            named += 1;
        }
    }
    assert!(named >= 10, "only {named} metric names in the dashboard's queries");
    // And every family a run exports is on the dashboard or documented in docs/metrics.md.
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    for family in exported.keys() {
        assert!(doc.contains(&format!("`{family}`")), "docs/metrics.md does not describe `{family}`");
    }
}
