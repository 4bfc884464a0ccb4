//! `run` of a plan with stages on other hosts (docs/multi-host.md): split it into parts, ask
//! each used host's agent to run its part, run this machine's part as an agent would, and wait
//! for every outcome. Signals drain every host (a second one ends them); a lost agent stops
//! the run, or with `on_host_loss = "wait"` is waited for. With a live table or `--metrics`,
//! each part sends its samples (`gpuipc/run/RUN/sample/HOST`); the coordinator merges them,
//! each stage labelled with its host, into its table and its endpoint.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zenoh::Wait;

use super::control::{self, Outcome, StartReply, StartRequest};
use super::part::{COORDINATOR_GRACE, PartRun, PartSpec};
use crate::config::{MetricsAddress, OnHostLoss};
use crate::metrics::{Board, RunState, Sample};
use crate::plan::Plan;
use crate::plan::split::{LOCAL, Part};
use crate::supervisor::RunReport;
use crate::supervisor::report::Live;

/// How long an agent is given to answer that it is up, and to check and start its part.
const AGENT_UP_TIMEOUT: Duration = Duration::from_secs(10);
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// What `run` was asked for.
pub struct RunArgs {
    pub frames: Option<u64>,
    pub report: Option<PathBuf>,
    pub checksums: Option<PathBuf>,
    /// The live table of every host's stages.
    pub live: bool,
    /// Serve every host's figures here.
    pub metrics: Option<MetricsAddress>,
    /// Serve the final figures this long after the run.
    pub linger: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("{0}")]
    Zenoh(String),
    #[error("host `{host}`: no agent answered at {control} within {} s (start it there: gpuipc-host agent --name {host} --listen {control})", AGENT_UP_TIMEOUT.as_secs())]
    AgentDown { host: String, control: String },
    #[error("host `{host}`: its agent runs gpuipc {theirs}, this is {ours}: run the same version on every host")]
    Version { host: String, theirs: String, ours: String },
    #[error("host `{host}`: its agent did not start its part: {why}")]
    Start { host: String, why: String },
    #[error(transparent)]
    Local(#[from] super::part::PartError),
}

/// Where a part stands on an agent whose token came back.
enum PartStatus {
    Running,
    Ended(Outcome),
    Unknown,
}

/// What the event loop hears.
enum Event {
    Outcome(Outcome),
    Sample(Sample),
    Agent { host: String, alive: bool },
    Signal,
}

/// Run `plan` over its hosts. Plan errors exit 2, a failed run 1.
pub fn run(plan: &Plan, args: &RunArgs) -> ExitCode {
    let file = plan.file.display().to_string();
    let parts = match std::fs::read_to_string(&plan.file)
        .map_err(|e| e.to_string())
        .and_then(|text| crate::plan::split::split(plan, &text).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{file}: error: {e}");
            return ExitCode::from(2);
        }
    };
    let (tx, events) = mpsc::channel();
    let (signals, claimed) = match crate::supervisor::Shutdown::claim(|| {
        signal_hook::iterator::Signals::new(crate::supervisor::STOP_SIGNALS)
    }) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    let handle = signals.handle();
    let signal_tx = tx.clone();
    std::thread::spawn(move || {
        let mut signals = signals;
        for _ in signals.forever() {
            if signal_tx.send(Event::Signal).is_err() {
                break;
            }
        }
    });
    // Bound before any host starts: a port in use is the command's error, not the run's.
    let board = args.metrics.as_ref().map(|_| Arc::new(Board::default()));
    let endpoint = match (&args.metrics, &board) {
        (Some(address), Some(board)) => {
            board.post(Sample::merge(&plan.name, &[]));
            match crate::metrics::server::Endpoint::start(address, board.clone()) {
                Ok(endpoint) => {
                    tracing::info!("{}", endpoint.where_to_scrape());
                    Some(endpoint)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        _ => None,
    };
    let code = match Coordinator::start(plan, &parts, args, tx, board.clone()) {
        Ok(mut c) => c.wait(&events, args),
        Err(e) => {
            if let Some(board) = &board {
                board.set_state(RunState::Failed);
            }
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    };
    if let Some(endpoint) = endpoint {
        linger(&events, args.linger);
        endpoint.stop();
    }
    // The stand-in first: a signal between the two ends the process rather than nothing.
    drop(claimed);
    handle.close();
    code
}

struct Coordinator<'p> {
    plan: &'p Plan,
    run: String,
    session: zenoh::Session,
    local: Option<PartRun>,
    /// Outcomes by host, as they come.
    outcomes: BTreeMap<String, Outcome>,
    /// Hosts whose outcome is awaited.
    pending: Vec<String>,
    /// Every part's host, in the plan's order, and its latest sample.
    hosts: Vec<String>,
    figures: BTreeMap<String, Sample>,
    board: Option<Arc<Board>>,
    live: Option<Live>,
    /// Kept alive for the run: the token agents watch, the subscribers that feed the events.
    _token: zenoh::liveliness::LivelinessToken,
    _outcomes: zenoh::pubsub::Subscriber<()>,
    _agents: zenoh::pubsub::Subscriber<()>,
    _samples: Option<zenoh::pubsub::Subscriber<()>>,
}

impl<'p> Coordinator<'p> {
    fn start(
        plan: &'p Plan,
        parts: &[Part],
        args: &RunArgs,
        tx: mpsc::Sender<Event>,
        board: Option<Arc<Board>>,
    ) -> Result<Coordinator<'p>, CoordinatorError> {
        let run = run_id();
        let remote: Vec<&Part> = parts.iter().filter(|p| p.host.is_some()).collect();
        let endpoints: Vec<&str> =
            remote.iter().map(|p| plan.hosts[p.host.expect("remote")].control.as_str()).collect();
        let zenoh_err = |what: &str, e: zenoh::Error| CoordinatorError::Zenoh(format!("{what}: {e}"));
        let session = zenoh::open(control::config(None, &endpoints).map_err(CoordinatorError::Zenoh)?)
            .wait()
            .map_err(|e| zenoh_err("cannot open a Zenoh session", e))?;
        let token = session
            .liveliness()
            .declare_token(control::coordinator_key(&run))
            .wait()
            .map_err(|e| zenoh_err("cannot declare the run's token", e))?;
        let out_tx = tx.clone();
        let outcomes = session
            .declare_subscriber(format!("gpuipc/run/{run}/outcome/*"))
            .callback(move |sample| {
                let text = sample.payload().try_to_string().map(|t| t.into_owned()).unwrap_or_default();
                match serde_json::from_str::<Outcome>(&text) {
                    Ok(o) => {
                        let _ = out_tx.send(Event::Outcome(o));
                    }
                    Err(e) => tracing::warn!("{}: not an outcome: {e}", sample.key_expr()),
                }
            })
            .wait()
            .map_err(|e| zenoh_err("cannot subscribe to outcomes", e))?;
        let samples = if args.live || board.is_some() {
            let sample_tx = tx.clone();
            let subscriber = session
                .declare_subscriber(format!("gpuipc/run/{run}/sample/*"))
                .callback(move |sample| {
                    let text = sample.payload().try_to_string().map(|t| t.into_owned()).unwrap_or_default();
                    match serde_json::from_str::<Sample>(&text) {
                        Ok(s) => {
                            let _ = sample_tx.send(Event::Sample(s));
                        }
                        Err(e) => tracing::debug!("{}: not a sample: {e}", sample.key_expr()),
                    }
                })
                .wait()
                .map_err(|e| zenoh_err("cannot subscribe to samples", e))?;
            Some(subscriber)
        } else {
            None
        };
        let agents = session
            .liveliness()
            .declare_subscriber("gpuipc/agent/*")
            .callback(move |sample| {
                let host = sample.key_expr().as_str().trim_start_matches("gpuipc/agent/").to_owned();
                let _ = tx.send(Event::Agent { host, alive: sample.kind() == zenoh::sample::SampleKind::Put });
            })
            .wait()
            .map_err(|e| zenoh_err("cannot watch the agents", e))?;
        let mut me = Coordinator {
            plan,
            run,
            session,
            local: None,
            outcomes: BTreeMap::new(),
            pending: Vec::new(),
            hosts: parts.iter().map(|p| p.host_name.clone()).collect(),
            figures: BTreeMap::new(),
            board,
            live: args.live.then(|| Live::new(&[], true)),
            _token: token,
            _outcomes: outcomes,
            _agents: agents,
            _samples: samples,
        };
        for part in &remote {
            me.check_agent(part)?;
        }
        for p in parts {
            eprintln!("run {}: host `{}` runs {}", me.run, p.host_name, p.stages.join(", "));
        }
        for part in &remote {
            if let Err(e) = me.start_remote(part, args) {
                me.abort();
                return Err(e);
            }
        }
        if let Some(local) = parts.iter().find(|p| p.host.is_none()) {
            let spec = PartSpec {
                run: me.run.clone(),
                host: LOCAL.to_owned(),
                pipeline: local.toml.clone(),
                frames: args.frames,
                checksums: checksums_of(args, LOCAL),
                samples: me.wants_samples(),
            };
            let out = me.outcome_sender();
            match PartRun::start(spec, me.sample_sender(), out) {
                Ok(p) => {
                    me.local = Some(p);
                    me.pending.push(LOCAL.to_owned());
                }
                Err(e) => {
                    me.abort();
                    return Err(e.into());
                }
            }
        }
        Ok(me)
    }

    /// How the local part's outcome reaches the event loop: as a remote one does, over Zenoh
    /// to this session's own subscriber.
    fn outcome_sender(&self) -> impl Fn(Outcome) + Send + 'static {
        let (session, run) = (self.session.clone(), self.run.clone());
        move |o: Outcome| {
            let key = control::outcome_key(&run, &o.host);
            if let Err(e) = session.put(&key, serde_json::to_string(&o).expect("an outcome serialises")).wait() {
                tracing::warn!("cannot publish {key}: {e}");
            }
        }
    }

    /// Whether the parts send their samples: for the live table or the endpoint.
    fn wants_samples(&self) -> bool {
        self.live.is_some() || self.board.is_some()
    }

    /// How the local part's samples reach the event loop: as a remote one's do.
    fn sample_sender(&self) -> impl Fn(Sample) + Send + 'static {
        let (session, key) = (self.session.clone(), control::sample_key(&self.run, LOCAL));
        let wanted = self.wants_samples();
        move |s: Sample| {
            if wanted && let Err(e) = session.put(&key, serde_json::to_string(&s).expect("a sample serialises")).wait()
            {
                tracing::debug!("cannot publish {key}: {e}");
            }
        }
    }

    /// A host's latest figures: the table and the endpoint show every host's.
    fn on_sample(&mut self, sample: Sample) {
        // A part's rows carry its host (agent/part.rs); a part with no stage has none to show.
        let Some(host) = sample.processes.first().map(|p| p.host.clone()) else { return };
        if !self.hosts.contains(&host) {
            return;
        }
        self.figures.insert(host, sample);
        self.show();
    }

    /// Every host's figures as one sample, on the endpoint and in the table.
    fn show(&mut self) -> Sample {
        let parts: Vec<(&str, Option<&Sample>)> =
            self.hosts.iter().map(|h| (h.as_str(), self.figures.get(h))).collect();
        let merged = Sample::merge(&self.plan.name, &parts);
        if let Some(live) = &mut self.live {
            let rows: Vec<(String, &crate::link::stats::StatsSnapshot)> = merged
                .processes
                .iter()
                .map(|p| {
                    let replica = if p.replica > 0 { format!("#{}", p.replica) } else { String::new() };
                    (format!("{} {}{replica}", p.host, p.stage), &p.stats)
                })
                .collect();
            live.show(&rows);
        }
        if let Some(board) = &self.board {
            board.post(merged.clone());
        }
        merged
    }

    /// The part's agent is up and runs our version.
    fn check_agent(&self, part: &Part) -> Result<(), CoordinatorError> {
        let host = &self.plan.hosts[part.host.expect("remote")];
        let deadline = Instant::now() + AGENT_UP_TIMEOUT;
        // The session connects in the background: ask again until the deadline.
        while Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(2));
            let Ok(replies) = self.session.get(control::info_key(&host.name)).timeout(left).wait() else { break };
            if let Ok(reply) = replies.recv()
                && let Ok(sample) = reply.result()
            {
                let text = sample.payload().try_to_string().map(|t| t.into_owned()).unwrap_or_default();
                let info: control::AgentInfo = serde_json::from_str(&text).map_err(|e| CoordinatorError::Start {
                    host: host.name.clone(),
                    why: format!("an answer that is not an agent's: {e}"),
                })?;
                if info.version != env!("CARGO_PKG_VERSION") {
                    return Err(CoordinatorError::Version {
                        host: host.name.clone(),
                        theirs: info.version,
                        ours: env!("CARGO_PKG_VERSION").to_owned(),
                    });
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())));
        }
        Err(CoordinatorError::AgentDown { host: host.name.clone(), control: host.control.clone() })
    }

    fn start_remote(&mut self, part: &Part, args: &RunArgs) -> Result<(), CoordinatorError> {
        let host = part.host_name.clone();
        let request = StartRequest {
            run: self.run.clone(),
            host: host.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pipeline: part.toml.clone(),
            frames: args.frames,
            checksums: checksums_of(args, &host),
            on_host_loss: self.plan.on_host_loss,
            samples: self.wants_samples(),
        };
        let failed = |why: String| CoordinatorError::Start { host: host.clone(), why };
        let replies = self
            .session
            .get(control::start_key(&host))
            .payload(serde_json::to_string(&request).expect("a request serialises"))
            .timeout(START_TIMEOUT)
            .wait()
            .map_err(|e| failed(e.to_string()))?;
        let reply = replies.recv().map_err(|_| failed(format!("no answer within {} s", START_TIMEOUT.as_secs())))?;
        let sample =
            reply.result().map_err(|e| failed(format!("it answered an error: {:?}", e.payload().try_to_string())))?;
        let text = sample.payload().try_to_string().map(|t| t.into_owned()).unwrap_or_default();
        match serde_json::from_str::<StartReply>(&text)
            .map_err(|e| failed(format!("an answer that is not a start reply: {e}")))?
        {
            StartReply::Started { pid } => {
                eprintln!("run {}: host `{host}` started its part (pid {pid} there)", self.run);
                self.pending.push(host);
                Ok(())
            }
            StartReply::Refused { error } => Err(failed(error)),
        }
    }

    fn publish(&self, key: String) {
        if let Err(e) = self.session.put(&key, "").wait() {
            tracing::warn!("cannot publish {key}: {e}");
        }
    }

    /// Every host drains its part.
    fn drain(&self) {
        self.publish(control::stop_key(&self.run));
        if let Some(p) = &self.local {
            p.drain();
        }
    }

    /// Every host ends its part now.
    fn abort(&self) {
        self.publish(control::abort_key(&self.run));
        if let Some(p) = &self.local {
            p.kill();
        }
    }

    /// The event loop: until every awaited outcome is in, or the run is given up.
    fn wait(&mut self, events: &mpsc::Receiver<Event>, args: &RunArgs) -> ExitCode {
        let mut signals = 0;
        let mut failure: Option<String> = None;
        let mut lost: Vec<String> = Vec::new();
        // Once the run is ending: when what is still running is killed, and when it is given up.
        let mut kill_at: Option<Instant> = None;
        let mut give_up_at: Option<Instant> = None;
        while !self.pending.is_empty() {
            let now = Instant::now();
            if let Some(at) = kill_at
                && now >= at
            {
                self.abort();
                kill_at = None;
                give_up_at = Some(now + COORDINATOR_GRACE);
            }
            if give_up_at.is_some_and(|at| now >= at) {
                failure.get_or_insert_with(|| {
                    format!("hosts {} did not say how their parts ended", self.pending.join(", "))
                });
                break;
            }
            let next = [kill_at, give_up_at]
                .into_iter()
                .flatten()
                .min()
                .map_or(Duration::from_secs(1), |at| at.saturating_duration_since(now));
            let event = match events.recv_timeout(next) {
                Ok(e) => e,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The endpoint's health: this loop is alive, figures or not.
                    self.show();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            match event {
                Event::Signal => {
                    signals += 1;
                    if signals == 1 {
                        eprintln!("run {}: stopping: every host drains its part (again to end them now)", self.run);
                        self.drain();
                        kill_at = Some(Instant::now() + COORDINATOR_GRACE);
                    } else {
                        eprintln!("run {}: ending every host's part now", self.run);
                        self.abort();
                        give_up_at = Some(Instant::now() + COORDINATOR_GRACE);
                    }
                }
                Event::Outcome(o) => self.on_outcome(o, &mut failure, &mut kill_at, signals),
                Event::Sample(s) => self.on_sample(s),
                Event::Agent { host, alive } if self.pending.contains(&host) => match (alive, self.plan.on_host_loss) {
                    (false, OnHostLoss::Stop) => {
                        let why = format!(
                            "host `{host}` was lost: its agent's liveliness token vanished (on_host_loss = \"{}\")",
                            OnHostLoss::Stop.name()
                        );
                        eprintln!("run {}: {why}; ending the other hosts' parts", self.run);
                        failure.get_or_insert(why);
                        self.pending.retain(|h| h != &host);
                        lost.push(host);
                        self.abort();
                        give_up_at.get_or_insert(Instant::now() + COORDINATOR_GRACE);
                    }
                    (false, OnHostLoss::Wait) => {
                        eprintln!(
                            "run {}: host `{host}` was lost; the others run on until it is back (on_host_loss = \"{}\")",
                            self.run,
                            OnHostLoss::Wait.name()
                        );
                    }
                    (true, _) => {
                        let status = self.part_status(&host);
                        if let PartStatus::Ended(o) = status {
                            eprintln!("run {}: host `{host}` is back; its part had ended", self.run);
                            self.on_outcome(o, &mut failure, &mut kill_at, signals);
                        } else if let PartStatus::Running = status {
                            eprintln!("run {}: host `{host}` is back", self.run);
                        } else {
                            let why = format!(
                                "host `{host}` came back without its part of the run (its agent was restarted)"
                            );
                            eprintln!("run {}: {why}", self.run);
                            failure.get_or_insert(why);
                            self.pending.retain(|h| h != &host);
                            lost.push(host);
                            self.drain();
                            kill_at.get_or_insert(Instant::now() + COORDINATOR_GRACE);
                        }
                    }
                },
                Event::Agent { .. } => {}
            }
        }
        self.finish(failure, &lost, signals > 0, args)
    }

    /// A part's outcome: one that failed first drains the others.
    fn on_outcome(&mut self, o: Outcome, failure: &mut Option<String>, kill_at: &mut Option<Instant>, signals: u32) {
        if !self.pending.contains(&o.host) {
            return;
        }
        self.pending.retain(|h| h != &o.host);
        // Its final figures: they agree with its report.
        if let Some(sample) = &o.sample {
            self.figures.insert(o.host.clone(), (**sample).clone());
            self.show();
        }
        if !o.succeeded() && failure.is_none() && signals < 2 {
            let why = o.failure();
            eprintln!("run {}: {why}; the other hosts drain", self.run);
            *failure = Some(why);
            self.drain();
            kill_at.get_or_insert(Instant::now() + COORDINATOR_GRACE);
        }
        self.outcomes.insert(o.host.clone(), o);
    }

    /// Where `host`'s part stands, asked when its agent's token comes back. The token can come
    /// back before its answers do (declarations travel one after another): only the answer
    /// `unknown`, or none within [`AGENT_UP_TIMEOUT`], says it has lost the part.
    fn part_status(&self, host: &str) -> PartStatus {
        let deadline = Instant::now() + AGENT_UP_TIMEOUT;
        while Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_secs(2));
            let answer = self
                .session
                .get(control::status_key(&self.run, host))
                .timeout(left)
                .wait()
                .ok()
                .and_then(|replies| replies.recv().ok())
                .and_then(|r| r.result().ok().and_then(|s| s.payload().try_to_string().ok().map(|t| t.into_owned())));
            match answer.as_deref() {
                Some("running") => return PartStatus::Running,
                // It ended while this coordinator was cut off: its outcome was published then.
                Some(text) => return serde_json::from_str(text).map_or(PartStatus::Unknown, PartStatus::Ended),
                None => std::thread::sleep(
                    Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
                ),
            }
        }
        PartStatus::Unknown
    }

    /// The merged report, the table, the report file and the exit code.
    fn finish(&mut self, failure: Option<String>, lost: &[String], interrupted: bool, args: &RunArgs) -> ExitCode {
        if let Some(live) = &self.live {
            live.finish();
        }
        let report = merge(&self.plan.name, &self.outcomes, failure.as_deref(), interrupted);
        let succeeded = failure.is_none() && report.succeeded() && self.outcomes.values().all(Outcome::succeeded);
        // The final figures; the run's state as its report says it ended, whatever a lost
        // host last sent.
        self.live = None;
        self.show();
        if let Some(board) = &self.board {
            board.set_state(match (succeeded, report.interrupted.is_some()) {
                (true, false) => RunState::Finished,
                (true, true) => RunState::Stopped,
                (false, _) => RunState::Failed,
            });
        }
        let mut text = report.render();
        for host in lost {
            text.push_str(&format!("\nhost `{host}`: lost; its stages' rows are missing"));
        }
        println!("{text}");
        if let Some(path) = &args.report {
            let json = serde_json::to_string_pretty(&report).expect("the report serialises");
            if let Err(e) = std::fs::write(path, json) {
                eprintln!("error: cannot write the report to {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        if succeeded { ExitCode::SUCCESS } else { ExitCode::from(1) }
    }
}

/// With `--metrics-linger`: serve the final figures this long after the run, or until a
/// stop signal.
fn linger(events: &mpsc::Receiver<Event>, linger: Duration) {
    if linger.is_zero() {
        return;
    }
    tracing::info!(
        "serving the run's final metrics for {} more (a stop signal ends it)",
        crate::config::format_duration(linger)
    );
    let deadline = Instant::now() + linger;
    loop {
        match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Signal) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The parts' reports as one, each row with its host.
fn merge(pipeline: &str, outcomes: &BTreeMap<String, Outcome>, failure: Option<&str>, interrupted: bool) -> RunReport {
    let mut merged = RunReport {
        pipeline: pipeline.to_owned(),
        stages: Vec::new(),
        links: Vec::new(),
        failure: None,
        interrupted: None,
        seconds: 0.0,
        warnings: Vec::new(),
    };
    for (host, o) in outcomes {
        let Some(report) = o.report.clone().and_then(|r| serde_json::from_value::<RunReport>(r).ok()) else { continue };
        merged.stages.extend(report.stages.into_iter().map(|mut s| {
            s.host = Some(host.clone());
            s
        }));
        merged.links.extend(report.links.into_iter().map(|mut l| {
            l.host = Some(host.clone());
            l
        }));
        merged.seconds = merged.seconds.max(report.seconds);
        merged.warnings.extend(report.warnings.into_iter().map(|w| format!("host `{host}`: {w}")));
        if merged.interrupted.is_none() {
            merged.interrupted = report.interrupted;
        }
    }
    if interrupted && merged.interrupted.is_none() {
        merged.interrupted = Some("a signal".to_owned());
    }
    // "host" as the failing party: the render says "stopped: WHY", WHY naming host and stage.
    merged.failure = failure.map(|f| ("host".to_owned(), f.to_owned()));
    merged
}

/// `run --checksums DIR`: each host's checksum files in `DIR/HOST` (a receiver is named like
/// its producer, so one folder for all would mix them).
fn checksums_of(args: &RunArgs, host: &str) -> Option<PathBuf> {
    args.checksums.as_ref().map(|d| std::path::absolute(d.join(host)).unwrap_or_else(|_| d.join(host)))
}

/// A run's id: random, so runs of one pipeline never share keys.
fn run_id() -> String {
    let mut bytes = [0u8; 6];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if random.is_err() {
        // Without /dev/urandom, the pid and the clock are unique enough on one coordinator.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        bytes.copy_from_slice(&(t ^ u64::from(std::process::id()) << 32).to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
