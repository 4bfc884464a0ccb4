//! What a run did: per-stage outcome, frames, rate and drops; live on the terminal while it
//! runs, as a table at the end, and as JSON on request.

use std::fmt::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::control::FromStage;
use crate::link::stats::{Histogram, Plausible, StatsSnapshot};
use crate::link::{RingMap, StatsMap};
use crate::plan::{Plan, ProcessPlan};

/// How one stage ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageOutcome {
    /// Drained and exited 0.
    Finished,
    /// Stopped because another stage failed or the run was interrupted.
    Stopped,
    /// This stage failed; the text says why.
    Failed(String),
    /// One of a stage's replicas failed for good; its stage went on with the others.
    Gone(String),
}

fn signal_name(signal: i32) -> String {
    use signal_hook::consts::signal::*;
    let names = [
        (SIGHUP, "SIGHUP"),
        (SIGINT, "SIGINT"),
        (SIGQUIT, "SIGQUIT"),
        (SIGILL, "SIGILL"),
        (SIGTRAP, "SIGTRAP"),
        (SIGABRT, "SIGABRT"),
        (SIGBUS, "SIGBUS"),
        (SIGFPE, "SIGFPE"),
        (SIGKILL, "SIGKILL"),
        (SIGSEGV, "SIGSEGV"),
        (SIGPIPE, "SIGPIPE"),
        (SIGTERM, "SIGTERM"),
        (SIGSYS, "SIGSYS"),
    ];
    names.iter().find(|(n, _)| *n == signal).map_or_else(|| format!("signal {signal}"), |(_, name)| name.to_string())
}

impl StageOutcome {
    /// Judge an exited stage by its status and the last thing it said.
    pub fn judge(status: ExitStatus, last: Option<&FromStage>, after_failure: bool) -> StageOutcome {
        match (status.code(), last) {
            (Some(0), Some(FromStage::Finished)) => StageOutcome::Finished,
            (_, Some(FromStage::Aborted)) => StageOutcome::Stopped,
            _ if after_failure => StageOutcome::Stopped,
            (_, Some(FromStage::Failed { error, .. })) => StageOutcome::Failed(error.clone()),
            (Some(0), last) => StageOutcome::Failed(format!(
                "exited without finishing its stream (exit code 0; its last message: {})",
                last.map_or("none".to_owned(), |m| format!("{m:?}"))
            )),
            (Some(code), _) => StageOutcome::Failed(format!("exited with code {code}")),
            (None, _) => match status.signal() {
                Some(sig) => StageOutcome::Failed(format!(
                    "killed by {}{}",
                    signal_name(sig),
                    if status.core_dumped() { " (core dumped)" } else { "" }
                )),
                None => StageOutcome::Failed("ended for an unknown reason".into()),
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageReport {
    pub name: String,
    /// The host it ran on, in a run over several hosts (docs/multi-host.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub plugin: String,
    pub domain: String,
    pub frames: u64,
    pub fps: f64,
    pub dropped: u64,
    /// Frames lost inside processes of this stage that died.
    pub lost: u64,
    /// Times the stage was started again after a failure.
    pub restarts: u64,
    /// Frames made from damaged data (a decoder concealed errors in them), counted in
    /// `frames` too.
    #[serde(default)]
    pub damaged: u64,
    /// Share of the stage's active time spent inside the plugin.
    pub busy: f64,
    /// CPU time of the stage's process per unit of its active time (1.0: one core).
    pub cpu: f64,
    /// Per frame, from its source's stamp to the end of this stage's work on it (in the cuda
    /// domain: its host's work, the GPU's enqueued), over the frames this stage did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Times>,
    /// Per frame, the time inside the plugin's `process`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_time: Option<Times>,
    pub outcome: StageOutcome,
    /// The knobs it ran with (`plan::tuning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<crate::plan::tuning::Tuning>,
}

/// A distribution of per-frame times: the mean (exact) and quantiles estimated from the
/// histogram's buckets (as Prometheus's `histogram_quantile` does), which comes along:
/// `histogram.buckets[i]` frames took at most `link::stats::BUCKET_BOUNDS_NS[i]` (and more
/// than the bound before), the last bucket every longer time (docs/metrics.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Times {
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub histogram: Histogram,
}

impl Times {
    /// `None` for a histogram without frames.
    pub fn of(h: &Histogram) -> Option<Times> {
        let ms = |ns: Option<f64>| ns.unwrap_or(0.0) / 1e6;
        h.mean_ns().map(|mean| Times {
            mean_ms: mean / 1e6,
            p50_ms: ms(h.quantile_ns(0.5)),
            p90_ms: ms(h.quantile_ns(0.9)),
            p99_ms: ms(h.quantile_ns(0.99)),
            histogram: *h,
        })
    }
}

/// A time in milliseconds for the table: 3 significant figures or so, `-` for none.
fn ms_cell(ms: Option<f64>) -> String {
    match ms {
        None => "-".to_owned(),
        Some(ms) if ms < 10.0 => format!("{ms:.2}"),
        Some(ms) if ms < 100.0 => format!("{ms:.1}"),
        Some(ms) => format!("{ms:.0}"),
    }
}

/// What became of the frames of one link at one of its consumers. Every frame the producer
/// made was delivered (the consumer did its work on it), dropped on the way (by the link's
/// policy, to align a join's inputs, given up with a producer process that died before its
/// GPU work ran, or left when the stream ended), or lost inside a consumer process that died
/// (counted on each link it had taken the frame from):
/// `produced = delivered + dropped + lost`, exactly, however many processes died.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkReport {
    /// `producer -> consumers`, as the plan names the link.
    pub link: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub producer: String,
    pub consumer: String,
    pub produced: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub lost: u64,
}

impl LinkReport {
    /// Whether every frame made is accounted for once.
    pub fn balances(&self) -> bool {
        self.produced == self.delivered + self.dropped + self.lost
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub pipeline: String,
    pub stages: Vec<StageReport>,
    /// Each link's frames at each consumer (a run's links in this process's part).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkReport>,
    /// The stage that failed first and why; `None` when every stage finished.
    pub failure: Option<(String, String)>,
    /// Set when a signal stopped the run and the pipeline drained.
    pub interrupted: Option<String>,
    pub seconds: f64,
    /// Counters a stage reported that cannot be true, each naming the stage and the field.
    pub warnings: Vec<String>,
}

impl RunReport {
    /// One row per process of `procs` (a stage, or each of its replicas), with its stats.
    pub fn new(
        plan: &Plan,
        procs: &[ProcessPlan],
        stats: &[StatsMap],
        outcomes: Vec<Option<StageOutcome>>,
        failure: Option<(usize, String)>,
        interrupted: Option<&str>,
        elapsed: Option<Duration>,
    ) -> RunReport {
        let plausible = plausible_since(elapsed.unwrap_or_default());
        let mut warnings = Vec::new();
        let stages = procs
            .iter()
            .zip(stats)
            .zip(outcomes)
            .map(|((p, st), outcome)| {
                let s = &plan.stages[p.stage];
                let (snap, bad) = plausible.check(st.snapshot());
                for (field, value) in bad {
                    // A stage copies its drops from its input links' control blocks, which
                    // any stage of those links can write.
                    let whose = match field {
                        "dropped" if !s.inputs.is_empty() => {
                            let links: Vec<String> = s.inputs.iter().map(|i| format!("'{}'", plan.link_name(i.link))).collect();
                            format!("counted from the control block of link {}: something wrote over it", links.join(" or "))
                        }
                        _ => "the stage wrote over its own counters".to_owned(),
                    };
                    warnings.push(format!(
                        "stage '{}': its statistics block says {field} = {value}, which a run of {:.2} s cannot have; shown as 0 ({whose})",
                        p.name,
                        elapsed.unwrap_or_default().as_secs_f64()
                    ));
                }
                StageReport::new(&p.name, &s.plugin.name, s.domain.name(), &snap, outcome.unwrap_or(StageOutcome::Stopped))
            })
            .collect();
        let failure = failure.map(|(i, why)| {
            let who = procs.get(i).map_or("host".to_owned(), |p| p.name.clone());
            (who, why)
        });
        RunReport {
            pipeline: plan.name.clone(),
            stages,
            links: Vec::new(),
            failure,
            interrupted: interrupted.map(str::to_owned),
            seconds: elapsed.map_or(0.0, |d| d.as_secs_f64()),
            warnings,
        }
    }

    /// Fill in [`RunReport::links`] from the stage rows and the rings' counters (after the
    /// run: nothing writes them any more). A ring's counters are shared memory any stage of
    /// the link can write: one no run could have is named in a warning, with the link, and
    /// shown as 0.
    pub fn with_links(mut self, plan: &Plan, procs: &[ProcessPlan], rings: &[RingMap]) -> RunReport {
        let sum = |stage: usize, field: fn(&StageReport) -> u64| -> u64 {
            procs.iter().zip(&self.stages).filter(|(p, _)| p.stage == stage).map(|(_, row)| field(row)).sum()
        };
        let mut links = Vec::new();
        for (l, (link, ring)) in plan.links.iter().zip(rings).enumerate() {
            let published = ring.header().producer.0.published.load(std::sync::atomic::Ordering::Acquire);
            for (c, &consumer) in link.consumers.iter().enumerate() {
                let mut plausible = |what: &str, count: u64| {
                    if count <= published {
                        return count;
                    }
                    self.warnings.push(format!(
                        "link '{}': its control block says consumer '{}' {what} {count} of the {published} frames published on it; shown as 0 (something wrote over the ring's control block)",
                        plan.link_name(l),
                        plan.stages[consumer].name
                    ));
                    0
                };
                let (dropped, lost) = (plausible("dropped", ring.dropped(c)), plausible("lost", ring.lost(c)));
                links.push(LinkReport {
                    link: plan.link_name(l),
                    host: None,
                    producer: plan.stages[link.producer].name.to_string(),
                    consumer: plan.stages[consumer].name.to_string(),
                    produced: sum(link.producer, |r| r.frames),
                    delivered: sum(consumer, |r| r.frames),
                    dropped,
                    lost,
                });
            }
        }
        // A run that finished or drained left no frame in flight: every link balances, or a
        // count is wrong (a bug of ours, or a control block written over).
        if self.succeeded() {
            for l in links.iter().filter(|l| !l.balances()) {
                self.warnings.push(format!(
                    "link '{}' at '{}': {} frames made, but {} delivered + {} dropped + {} lost",
                    l.link, l.consumer, l.produced, l.delivered, l.dropped, l.lost
                ));
            }
        }
        self.links = links;
        self
    }

    /// Each row's knobs, as its process was given them (`plan::tuning`; `spin_us` from the
    /// command line, if it set one).
    pub fn with_tuning(mut self, plan: &Plan, procs: &[ProcessPlan], spin_us: Option<u32>) -> RunReport {
        let overrides = crate::plan::tuning::Overrides::from_env(spin_us);
        for (row, p) in self.stages.iter_mut().zip(procs) {
            row.tuning = Some(crate::plan::tuning::Tuning::resolve(plan, p.stage, &overrides));
        }
        self
    }

    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
            && self.stages.iter().all(|s| matches!(s.outcome, StageOutcome::Finished | StageOutcome::Gone(_)))
    }

    /// The end-of-run table.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let width = self.stages.iter().map(|s| s.name.len()).max().unwrap_or(5).max(5);
        // A run over several hosts shows where each stage ran (a receiver has its producer's name).
        let hosts = self.stages.iter().any(|s| s.host.is_some());
        let host_width = self.stages.iter().filter_map(|s| s.host.as_ref().map(String::len)).max().unwrap_or(0).max(4);
        let host_cell =
            |h: Option<&str>| if hosts { format!("{:host_width$}  ", h.unwrap_or("")) } else { String::new() };
        // Frames made from damaged data (a decoder's concealed errors) get a column when any
        // stage made one.
        let damaged = self.stages.iter().any(|s| s.damaged > 0);
        let damaged_cell = |d: Option<u64>| match (damaged, d) {
            (false, _) => String::new(),
            (true, None) => format!(" {:>8}", "damaged"),
            (true, Some(n)) => format!(" {n:>8}"),
        };
        let _ = writeln!(
            out,
            "{}{:width$}  {:12} {:6} {:>10} {:>12} {:>9} {:>6} {:>8}{} {:>6} {:>6} {:>8} {:>8}  outcome",
            host_cell(Some("host")),
            "stage",
            "plugin",
            "domain",
            "frames",
            "fps",
            "dropped",
            "lost",
            "restarts",
            damaged_cell(None),
            "busy",
            "cpu",
            "p50 ms",
            "p99 ms"
        );
        for s in &self.stages {
            let outcome = match &s.outcome {
                StageOutcome::Finished => "finished".to_owned(),
                StageOutcome::Stopped => "stopped".to_owned(),
                StageOutcome::Failed(why) => format!("FAILED: {why}"),
                StageOutcome::Gone(why) => format!("GONE: {why} (its stage went on without it)"),
            };
            let _ = writeln!(
                out,
                "{}{:width$}  {:12} {:6} {:>10} {:>12.1} {:>9} {:>6} {:>8}{} {:>5.1}% {:>5.0}% {:>8} {:>8}  {outcome}",
                host_cell(s.host.as_deref()),
                s.name,
                s.plugin,
                s.domain,
                s.frames,
                s.fps,
                s.dropped,
                s.lost,
                s.restarts,
                damaged_cell(Some(s.damaged)),
                s.busy * 100.0,
                s.cpu * 100.0,
                ms_cell(s.latency.as_ref().map(|t| t.p50_ms)),
                ms_cell(s.latency.as_ref().map(|t| t.p99_ms))
            );
        }
        // Where frames went missing, link by link (a join's stage row counts a number missed
        // on several inputs once).
        for l in self.links.iter().filter(|l| l.dropped > 0 || l.lost > 0) {
            let host = l.host.as_ref().map_or(String::new(), |h| format!(" on {h}"));
            let _ = writeln!(
                out,
                "link {} at '{}'{host}: {} made, {} delivered, {} dropped, {} lost",
                l.link, l.consumer, l.produced, l.delivered, l.dropped, l.lost
            );
        }
        for warning in &self.warnings {
            let _ = writeln!(out, "warning: {warning}");
        }
        match (&self.failure, &self.interrupted) {
            (Some((who, why)), _) if who == "host" => {
                let _ = write!(out, "run '{}' stopped: {why}", self.pipeline);
            }
            (Some((who, why)), _) => {
                let _ = write!(out, "run '{}' failed: stage '{who}' {why}{}", self.pipeline, limit_hint(why));
            }
            (None, Some(signal)) => {
                let _ = write!(out, "run '{}' stopped by {signal} and drained in {:.2} s", self.pipeline, self.seconds);
            }
            (None, None) => {
                let _ = write!(out, "run '{}' finished in {:.2} s", self.pipeline, self.seconds);
            }
        }
        out
    }
}

/// What to do about a failure that ran out of a per-process limit, after its message: the
/// system's words ("Too many open files") do not say which limit or how to raise it.
pub fn limit_hint(why: &str) -> &'static str {
    if why.contains("Too many open files") || why.contains("EMFILE") {
        " (the open-file limit of this shell: `ulimit -n` shows it, `ulimit -n 65536` raises it; each stage holds descriptors for its rings and links)"
    } else {
        ""
    }
}

/// The bounds of a run that started `elapsed` ago, on the wall clock stages stamp with.
pub(super) fn plausible_since(elapsed: Duration) -> Plausible {
    let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    Plausible { start_ns: now_ns.saturating_sub(elapsed.as_nanos() as u64), now_ns }
}

impl StageReport {
    pub(crate) fn new(
        name: &str,
        plugin: &str,
        domain: &str,
        snap: &StatsSnapshot,
        outcome: StageOutcome,
    ) -> StageReport {
        let active = snap.last_ns.saturating_sub(snap.first_ns);
        StageReport {
            name: name.to_owned(),
            host: None,
            plugin: plugin.to_owned(),
            domain: domain.to_owned(),
            frames: snap.frames,
            fps: snap.fps(),
            dropped: snap.dropped,
            lost: snap.lost,
            restarts: snap.restarts,
            damaged: snap.damaged,
            busy: if active == 0 { 0.0 } else { (snap.busy_ns as f64 / active as f64).min(1.0) },
            cpu: snap.cpu_share(),
            latency: Times::of(&snap.latency),
            process_time: Times::of(&snap.process),
            outcome,
            tuning: None,
        }
    }
}

/// Live per-stage lines on the terminal (nothing when stderr is not a terminal).
pub struct Live {
    bars: Vec<ProgressBar>,
    multi: MultiProgress,
    style: ProgressStyle,
}

impl Live {
    pub fn new(procs: &[ProcessPlan], enabled: bool) -> Live {
        let target = if enabled { ProgressDrawTarget::stderr_with_hz(5) } else { ProgressDrawTarget::hidden() };
        let multi = MultiProgress::with_draw_target(target);
        let style = ProgressStyle::with_template("{prefix:>16.bold} {msg}").expect("the template is valid");
        let mut live = Live { bars: Vec::new(), multi, style };
        for p in procs {
            live.add(p.name.clone());
        }
        live
    }

    fn add(&mut self, name: String) {
        let bar = self.multi.add(ProgressBar::new_spinner().with_style(self.style.clone()));
        bar.set_prefix(name);
        self.bars.push(bar);
    }

    pub fn update(&self, stats: &[StatsMap]) {
        for (bar, st) in self.bars.iter().zip(stats) {
            bar.set_message(live_line(&st.snapshot()));
        }
    }

    /// Rows named by the caller, a line added for each new one: a run over several hosts
    /// shows each host's stages as their figures come.
    pub fn show(&mut self, rows: &[(String, &StatsSnapshot)]) {
        for (i, (name, snap)) in rows.iter().enumerate() {
            if i == self.bars.len() {
                self.add(name.clone());
            }
            self.bars[i].set_prefix(name.clone());
            self.bars[i].set_message(live_line(snap));
        }
    }

    pub fn finish(&self) {
        for bar in &self.bars {
            bar.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

/// A stage's live line: frames, rate, drops, losses, latency.
fn live_line(s: &StatsSnapshot) -> String {
    let mut line = format!("{:>10} frames {:>10.1} fps {:>8} dropped", s.frames, s.fps(), s.dropped);
    if s.restarts > 0 || s.lost > 0 {
        line += &format!(" {:>6} lost {:>4} restarts", s.lost, s.restarts);
    }
    if s.damaged > 0 {
        line += &format!(" {:>6} damaged", s.damaged);
    }
    if let Some(p50) = s.latency.quantile_ns(0.5) {
        let p99 = s.latency.quantile_ns(0.99).unwrap_or(p50);
        line += &format!("  latency p50 {} p99 {} ms", ms_cell(Some(p50 / 1e6)), ms_cell(Some(p99 / 1e6)));
    }
    line
}

#[cfg(test)]
mod limit_tests {
    use super::limit_hint;

    #[test]
    fn running_out_of_descriptors_says_which_limit() {
        assert!(limit_hint("cannot create ring: Too many open files (os error 24)").contains("ulimit -n"));
        assert_eq!(limit_hint("killed by SIGKILL"), "");
    }
}
