//! The agent of a host (docs/multi-host.md): `gpuipc-host agent --name NAME --listen ENDPOINT`.
//! It opens a Zenoh session listening on the endpoint (TCP, no multicast scouting: peers are
//! named, never discovered), announces itself with a liveliness token, answers what it is, and
//! runs the parts of runs coordinators ask it to ([`part`]), until SIGINT or SIGTERM, which
//! drain its parts first. With `--metrics ADDR` it serves its parts' figures as a run does
//! (docs/metrics.md), each stage labelled with this host's name.
//!
//! - [`control`]: the keys and messages between coordinators and agents.
//! - [`part`]: one host's part of a run, as a child `run`.
//! - [`coordinator`]: `run` of a plan with stages on other hosts.

pub mod control;
pub mod coordinator;
pub mod part;

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zenoh::Wait;

use crate::config::{MetricsAddress, OnHostLoss};
use crate::metrics::{Board, Sample};
use control::{StartReply, StartRequest};
use part::{PartRun, PartSpec};

/// Run the agent until a stop signal.
pub fn main(name: &str, listen: &str, metrics: Option<&MetricsAddress>) -> ExitCode {
    match serve(name, listen, metrics) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: agent '{name}': {e}");
            ExitCode::from(1)
        }
    }
}

/// A part this agent runs, by run id.
struct Running {
    part: PartRun,
    on_host_loss: OnHostLoss,
    /// Whether the run's coordinator is up, as its token last said.
    coordinator_up: Arc<AtomicBool>,
}

type Runs = Arc<Mutex<HashMap<String, Running>>>;

/// How many ended parts' outcomes an agent keeps for a coordinator that was cut off when they
/// were published (it asks when the agent's token is back).
const KEPT_OUTCOMES: usize = 64;

/// Outcomes of ended parts, by run, oldest first.
type Ended = Arc<Mutex<std::collections::VecDeque<(String, String)>>>;

/// What an agent's metrics endpoint shows: the latest sample of each of its parts, by run; a
/// part that ended is shown until another starts.
struct Figures {
    board: Arc<Board>,
    parts: Mutex<BTreeMap<String, (Sample, bool)>>,
}

impl Figures {
    fn new() -> Figures {
        let figures = Figures { board: Arc::default(), parts: Mutex::default() };
        figures.post(&BTreeMap::new());
        figures
    }

    /// A part of `run` starts: parts that ended are no longer shown.
    fn begin(&self, run: &str) {
        let mut parts = self.parts.lock().expect("figures lock");
        parts.retain(|_, (_, ended)| !*ended);
        parts.insert(run.to_owned(), (Sample::default(), false));
        self.post(&parts);
    }

    fn update(&self, run: &str, sample: Sample, ended: bool) {
        let mut parts = self.parts.lock().expect("figures lock");
        parts.insert(run.to_owned(), (sample, ended));
        self.post(&parts);
    }

    fn post(&self, parts: &BTreeMap<String, (Sample, bool)>) {
        let sample = match parts.len() {
            0 => Sample { not_ready: Some("this agent runs no part of a run".to_owned()), ..Sample::default() },
            1 => parts.values().next().expect("one part").0.clone(),
            _ => {
                let mut names: Vec<&str> = parts.values().map(|(s, _)| s.pipeline.as_str()).collect();
                names.dedup();
                let rows: Vec<(&str, Option<&Sample>)> =
                    parts.iter().map(|(run, (s, _))| (run.as_str(), Some(s))).collect();
                Sample::merge(&names.join(","), &rows)
            }
        };
        self.board.post(sample);
    }
}

fn serve(name: &str, listen: &str, metrics: Option<&MetricsAddress>) -> Result<(), String> {
    crate::config::StageName::parse(name)
        .map_err(|_| format!("name `{name}`: use letters, digits, `-` and `_`, starting with a letter"))?;
    // Bound first: a port in use is the command's error.
    let figures = metrics.map(|_| Arc::new(Figures::new()));
    let _endpoint = match (metrics, &figures) {
        (Some(address), Some(figures)) => {
            let endpoint =
                crate::metrics::server::Endpoint::start(address, figures.board.clone()).map_err(|e| e.to_string())?;
            eprintln!("agent '{name}': {}", endpoint.where_to_scrape());
            Some(endpoint)
        }
        _ => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let ((), _claimed) = crate::supervisor::Shutdown::claim(|| {
        crate::supervisor::STOP_SIGNALS
            .iter()
            .try_for_each(|&signal| signal_hook::flag::register(signal, stop.clone()).map(drop))
    })
    .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let session = zenoh::open(control::config(Some(listen), &[])?)
        .wait()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let info = serde_json::to_string(&control::AgentInfo::of_this_machine(name)).map_err(|e| e.to_string())?;
    let key = control::info_key(name);
    let _info = session
        .declare_queryable(&key)
        .callback(move |query| {
            if let Err(e) = query.reply(query.key_expr().clone(), info.clone()).wait() {
                tracing::warn!("cannot answer {}: {e}", query.key_expr());
            }
        })
        .wait()
        .map_err(|e| format!("cannot answer on {key}: {e}"))?;

    let runs: Runs = Arc::default();
    let ended: Ended = Arc::default();
    let declared = |what: &str, e: zenoh::Error| format!("cannot declare {what}: {e}");
    let (starts, s, r, e, f) =
        (control::start_key(name), session.clone(), runs.clone(), ended.clone(), figures.clone());
    let agent = name.to_owned();
    let _start = session
        .declare_queryable(&starts)
        .callback(move |query| {
            // Checking a part takes a while (it loads plugins): not on Zenoh's own threads.
            let (s, r, e, f, agent) = (s.clone(), r.clone(), e.clone(), f.clone(), agent.clone());
            std::thread::spawn(move || {
                let payload =
                    query.payload().and_then(|p| p.try_to_string().ok()).map(|t| t.into_owned()).unwrap_or_default();
                let reply = match serde_json::from_str::<StartRequest>(&payload) {
                    Ok(request) => start(&s, &r, &e, f, &agent, request),
                    Err(e) => StartReply::Refused { error: format!("not a start request: {e}") },
                };
                let text = serde_json::to_string(&reply).expect("a reply serialises");
                if let Err(e) = query.reply(query.key_expr().clone(), text).wait() {
                    tracing::warn!("cannot answer {}: {e}", query.key_expr());
                }
            });
        })
        .wait()
        .map_err(|e| declared(&starts, e))?;
    let r = runs.clone();
    let _stop = session
        .declare_subscriber("gpuipc/run/*/stop")
        .callback(move |sample| with_run(&r, sample.key_expr().as_str(), |run| run.part.drain()))
        .wait()
        .map_err(|e| declared("stop", e))?;
    let r = runs.clone();
    let _abort = session
        .declare_subscriber("gpuipc/run/*/abort")
        .callback(move |sample| with_run(&r, sample.key_expr().as_str(), |run| run.part.kill()))
        .wait()
        .map_err(|e| declared("abort", e))?;
    let r = runs.clone();
    let _coordinators = session
        .liveliness()
        .declare_subscriber("gpuipc/run/*/coordinator")
        .callback(move |sample| {
            let alive = sample.kind() == zenoh::sample::SampleKind::Put;
            let key = sample.key_expr().as_str().to_owned();
            with_run(&r, &key, |run| {
                run.coordinator_up.store(alive, Ordering::Relaxed);
                if !alive {
                    coordinator_lost(&r, &key, run);
                }
            });
        })
        .wait()
        .map_err(|e| declared("coordinators' liveliness", e))?;
    let (r, e) = (runs.clone(), ended.clone());
    let agent = name.to_owned();
    let _status = session
        .declare_queryable("gpuipc/run/*/status/*")
        .callback(move |query| {
            let key = query.key_expr().as_str().to_owned();
            if !key.ends_with(&format!("/status/{agent}")) {
                return;
            }
            // `running`, the outcome of a part that ended, or `unknown`.
            let answer = match control::run_of_key(&key) {
                Some(run) if r.lock().expect("runs lock").contains_key(run) => "running".to_owned(),
                Some(run) => e
                    .lock()
                    .expect("ended lock")
                    .iter()
                    .find(|(id, _)| id == run)
                    .map_or_else(|| "unknown".to_owned(), |(_, o)| o.clone()),
                None => "unknown".to_owned(),
            };
            let _ = query.reply(query.key_expr().clone(), answer).wait();
        })
        .wait()
        .map_err(|e| declared("status", e))?;
    // Announce itself last, once it answers everything a coordinator asks.
    let _token = session
        .liveliness()
        .declare_token(control::liveliness_key(name))
        .wait()
        .map_err(|e| format!("cannot announce itself: {e}"))?;
    eprintln!("agent '{name}' listening on {listen}; stop it with Ctrl-C or SIGTERM");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drain_all(&runs);
    session.close().wait().map_err(|e| format!("closing the session: {e}"))?;
    eprintln!("agent '{name}' stopped");
    Ok(())
}

/// Call `f` on the run a `gpuipc/run/RUN/...` key is about, if this agent runs it.
fn with_run(runs: &Runs, key: &str, f: impl FnOnce(&Running)) {
    if let Some(run) = control::run_of_key(key) {
        let runs = runs.lock().expect("runs lock");
        if let Some(running) = runs.get(run) {
            f(running);
        }
    }
}

/// Start the part `request` asks for, and say so.
fn start(
    session: &zenoh::Session,
    runs: &Runs,
    ended: &Ended,
    figures: Option<Arc<Figures>>,
    agent: &str,
    request: StartRequest,
) -> StartReply {
    let refuse = |error: String| StartReply::Refused { error };
    if request.host != agent {
        return refuse(format!("this agent is `{agent}`, not `{}`", request.host));
    }
    if request.version != env!("CARGO_PKG_VERSION") {
        return refuse(format!(
            "the coordinator runs gpuipc {}, this agent {}: run the same version on every host",
            request.version,
            env!("CARGO_PKG_VERSION")
        ));
    }
    if runs.lock().expect("runs lock").contains_key(&request.run) {
        return refuse(format!("run {} already has a part here", request.run));
    }
    let spec = PartSpec {
        run: request.run.clone(),
        host: request.host.clone(),
        pipeline: request.pipeline,
        frames: request.frames,
        checksums: request.checksums,
        samples: request.samples || figures.is_some(),
    };
    if let Some(f) = &figures {
        f.begin(&request.run);
    }
    // Each sample to the coordinator, when it asked for them, and to this agent's endpoint.
    let (s, run, host, wanted, f) =
        (session.clone(), request.run.clone(), request.host.clone(), request.samples, figures.clone());
    let on_sample = move |sample: Sample| {
        if wanted {
            let key = control::sample_key(&run, &host);
            if let Err(why) = s.put(&key, serde_json::to_string(&sample).expect("a sample serialises")).wait() {
                tracing::debug!("cannot publish {key}: {why}");
            }
        }
        if let Some(f) = &f {
            f.update(&run, sample, false);
        }
    };
    let (s, r, e, run) = (session.clone(), runs.clone(), ended.clone(), request.run.clone());
    // Set, under the runs' lock, once the part has ended: a part that ends at once is not
    // entered after its outcome took it out.
    let done = Arc::new(AtomicBool::new(false));
    let ended = done.clone();
    let started = PartRun::start(spec, on_sample, move |outcome| {
        if let (Some(f), Some(sample)) = (&figures, &outcome.sample) {
            f.update(&run, (**sample).clone(), true);
        }
        // Published before the run is forgotten: a draining agent closes its session only
        // once every outcome is out.
        let key = control::outcome_key(&run, &outcome.host);
        let text = serde_json::to_string(&outcome).expect("an outcome serialises");
        if let Err(why) = s.put(&key, text.clone()).wait() {
            tracing::warn!("cannot publish {key}: {why}");
        }
        {
            let mut kept = e.lock().expect("ended lock");
            if kept.len() == KEPT_OUTCOMES {
                kept.pop_front();
            }
            kept.push_back((run.clone(), text));
        }
        let mut runs = r.lock().expect("runs lock");
        ended.store(true, Ordering::Relaxed);
        runs.remove(&run);
    });
    match started {
        Ok(part) => {
            let pid = part.pid;
            let coordinator_up = Arc::new(AtomicBool::new(true));
            let mut all = runs.lock().expect("runs lock");
            if !done.load(Ordering::Relaxed) {
                all.insert(request.run.clone(), Running { part, on_host_loss: request.on_host_loss, coordinator_up });
            }
            eprintln!("agent '{agent}': run {} started (pid {pid})", request.run);
            StartReply::Started { pid }
        }
        Err(e) => refuse(e.to_string()),
    }
}

/// The coordinator of a run vanished: drain its part (after [`part::COORDINATOR_GRACE`] with
/// `on_host_loss = "wait"`, unless it is back by then), and kill it if it does not end within
/// the grace after that.
fn coordinator_lost(runs: &Runs, key: &str, running: &Running) {
    let Some(run) = control::run_of_key(key).map(str::to_owned) else { return };
    let (runs, up, wait) = (runs.clone(), running.coordinator_up.clone(), running.on_host_loss == OnHostLoss::Wait);
    eprintln!(
        "run {run}: its coordinator is gone; {}",
        if wait { "waiting for it to come back" } else { "draining its part" }
    );
    std::thread::spawn(move || {
        if wait {
            let deadline = Instant::now() + part::COORDINATOR_GRACE;
            while Instant::now() < deadline && !up.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            if up.load(Ordering::Relaxed) {
                return;
            }
        }
        with_run(&runs, &format!("gpuipc/run/{run}/"), |r| r.part.drain());
        let deadline = Instant::now() + part::COORDINATOR_GRACE;
        while Instant::now() < deadline && runs.lock().expect("runs lock").contains_key(&run) {
            std::thread::sleep(Duration::from_millis(100));
        }
        with_run(&runs, &format!("gpuipc/run/{run}/"), |r| r.part.kill());
    });
}

/// Drain every part, kill those still running after the grace, and wait until their outcomes
/// are published.
fn drain_all(runs: &Runs) {
    for r in runs.lock().expect("runs lock").values() {
        r.part.drain();
    }
    let deadline = Instant::now() + part::COORDINATOR_GRACE;
    let mut killed = false;
    let hard_deadline = deadline + Duration::from_secs(10);
    while !runs.lock().expect("runs lock").is_empty() && Instant::now() < hard_deadline {
        if !killed && Instant::now() >= deadline {
            for r in runs.lock().expect("runs lock").values() {
                r.part.kill();
            }
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
