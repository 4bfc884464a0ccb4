//! A [`Sample`] in Prometheus's text format (version 0.0.4), through the Prometheus org's
//! `prometheus-client` crate: names and units as its conventions have them (`gpuipc_` first,
//! the unit in the name, `_total` on counters), labels `pipeline`, `host`, `stage`,
//! `replica` on every stage's series. [`METRICS`] lists every name, for the docs and the
//! dashboard's test.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

use super::{RunState, Sample, readiness};
use crate::link::stats::{BUCKET_BOUNDS_NS, Histogram, StatsSnapshot};

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Every metric family exported, as a scrape names it (a histogram's series add `_bucket`,
/// `_sum` and `_count`); docs/metrics.md describes each (host/tests/metrics.rs checks).
#[cfg(test)]
const METRICS: &[&str] = &[
    "gpuipc_build_info",
    "gpuipc_run_state",
    "gpuipc_run_ready",
    "gpuipc_run_start_time_seconds",
    "gpuipc_stage_info",
    "gpuipc_stage_up",
    "gpuipc_stage_frames_total",
    "gpuipc_stage_dropped_frames_total",
    "gpuipc_stage_lost_frames_total",
    "gpuipc_stage_damaged_frames_total",
    "gpuipc_stage_restarts_total",
    "gpuipc_stage_busy_seconds_total",
    "gpuipc_stage_cpu_seconds_total",
    "gpuipc_stage_frames_per_second",
    "gpuipc_stage_process_seconds",
    "gpuipc_stage_latency_seconds",
    "gpuipc_link_queued_frames",
    "gpuipc_link_capacity_frames",
    "gpuipc_link_dropped_frames_total",
    "gpuipc_link_lost_frames_total",
    "gpuipc_gpu_memory_used_bytes",
    "gpuipc_gpu_memory_total_bytes",
];

/// The sample as a scrape's body.
pub fn render(sample: &Sample) -> String {
    let mut registry = Registry::with_prefix("gpuipc");
    registry.register_collector(Box::new(Run(sample.clone())));
    let mut text = String::new();
    // Writing to a String fails only if an encoder does: ours write numbers and strings.
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .expect("the exposition of a sample encodes");
    text
}

#[derive(Debug)]
struct Run(Sample);

type Labels = Vec<(&'static str, String)>;

/// A histogram as it stands: non-cumulative bucket counts and a sum.
#[derive(Debug)]
struct ConstHistogram<'h>(&'h Histogram);

impl EncodeMetric for ConstHistogram<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let bounds = BUCKET_BOUNDS_NS.iter().map(|&b| b as f64 / 1e9).chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(self.0.buckets).collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum_ns as f64 / 1e9, self.0.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One family: its descriptor, then one series per row.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    kind: MetricType,
    rows: impl IntoIterator<Item = (Labels, M)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for (labels, value) in rows {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Run {
    fn process_labels(&self) -> impl Iterator<Item = (Labels, &StatsSnapshot)> + '_ {
        self.0.processes.iter().map(|p| {
            let labels = vec![
                ("pipeline", self.0.pipeline.clone()),
                ("host", p.host.clone()),
                ("stage", p.stage.clone()),
                ("replica", p.replica.to_string()),
            ];
            (labels, &p.stats)
        })
    }

    fn counter(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        value: impl Fn(&StatsSnapshot) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let rows = self.process_labels().map(|(l, s)| (l, ConstCounter::new(value(s))));
        family(e, name, help, unit, MetricType::Counter, rows)
    }

    fn seconds(
        &self,
        e: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        ns: impl Fn(&StatsSnapshot) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let rows = self.process_labels().map(|(l, s)| (l, ConstCounter::new(ns(s) as f64 / 1e9)));
        family(e, name, help, Some(Unit::Seconds), MetricType::Counter, rows)
    }

    fn link_labels(&self) -> impl Iterator<Item = (Labels, &super::LinkSample)> + '_ {
        self.0.links.iter().map(|l| {
            let labels = vec![
                ("pipeline", self.0.pipeline.clone()),
                ("host", l.host.clone()),
                ("link", l.link.clone()),
                ("producer", l.producer.clone()),
                ("consumer", l.consumer.clone()),
            ];
            (labels, l)
        })
    }

    fn gpu_labels(&self) -> impl Iterator<Item = (Labels, &super::GpuSample)> + '_ {
        self.0.gpus.iter().map(|g| {
            let labels = vec![
                ("pipeline", self.0.pipeline.clone()),
                ("host", g.host.clone()),
                ("device", format!("cuda:{}", g.device)),
            ];
            (labels, g)
        })
    }
}

impl Collector for Run {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let pipeline = || ("pipeline", self.0.pipeline.clone());
        let s = &self.0;
        family(
            &mut e,
            "build",
            "The gpuipc-host serving these metrics.",
            None,
            MetricType::Info,
            [(vec![("version", env!("CARGO_PKG_VERSION").to_owned())], ConstInfo)],
        )?;
        let states = RunState::ALL.iter().map(|&state| {
            (vec![pipeline(), ("state", state.name().to_owned())], ConstGauge::new(i64::from(state == s.state)))
        });
        family(
            &mut e,
            "run_state",
            "1 for the state the run is in, 0 for the others.",
            None,
            MetricType::Gauge,
            states,
        )?;
        family(
            &mut e,
            "run_ready",
            "1 while every stage runs and frames flow (what /readyz answers 200 to).",
            None,
            MetricType::Gauge,
            [(vec![pipeline()], ConstGauge::new(i64::from(readiness(s).is_ok())))],
        )?;
        family(
            &mut e,
            "run_start_time",
            "When every stage was first told to run, in seconds since the Unix epoch.",
            Some(Unit::Seconds),
            MetricType::Gauge,
            s.started_at.map(|t| (vec![pipeline()], ConstGauge::new(t))),
        )?;
        let info = self.0.processes.iter().map(|p| {
            let labels = vec![
                pipeline(),
                ("host", p.host.clone()),
                ("stage", p.stage.clone()),
                ("replica", p.replica.to_string()),
                ("plugin", p.plugin.clone()),
                ("domain", p.domain.clone()),
                ("device", p.device.clone()),
            ];
            (labels, ConstInfo)
        });
        family(&mut e, "stage", "Each stage process: its plugin, domain and device.", None, MetricType::Info, info)?;
        let up = self.process_labels().zip(&s.processes).map(|((l, _), p)| (l, ConstGauge::new(i64::from(p.up))));
        family(
            &mut e,
            "stage_up",
            "1 while the stage's process runs its frame loop (0 while it starts, restarts or has ended).",
            None,
            MetricType::Gauge,
            up,
        )?;
        self.counter(&mut e, "stage_frames", "Frames the stage did (made, for a source).", None, |s| s.frames)?;
        self.counter(
            &mut e,
            "stage_dropped_frames",
            "Frames the stage missed on its inputs (its policy, aligning a join's inputs).",
            None,
            |s| s.dropped,
        )?;
        self.counter(&mut e, "stage_lost_frames", "Frames lost inside processes of the stage that died.", None, |s| {
            s.lost
        })?;
        self.counter(
            &mut e,
            "stage_damaged_frames",
            "Frames made from damaged data (a decoder concealed errors), counted in frames too.",
            None,
            |s| s.damaged,
        )?;
        self.counter(&mut e, "stage_restarts", "Times the stage was started again after a failure.", None, |s| {
            s.restarts
        })?;
        self.seconds(&mut e, "stage_busy", "Time the stage spent inside its plugin's process.", |s| s.busy_ns)?;
        self.seconds(
            &mut e,
            "stage_cpu",
            "CPU time of the stage's process since its first frame (the last process's, after a restart).",
            |s| s.cpu_ns,
        )?;
        let fps = self.process_labels().map(|(l, s)| (l, ConstGauge::new(s.fps())));
        family(
            &mut e,
            "stage_frames_per_second",
            "Frames a second between the stage's first frame and its last (rate() of the frames counter gives the recent rate).",
            None,
            MetricType::Gauge,
            fps,
        )?;
        let process = self.process_labels().map(|(l, s)| (l, ConstHistogram(&s.process)));
        family(
            &mut e,
            "stage_process",
            "Per frame, the time inside the plugin's process (in the cuda domain: enqueueing its GPU work).",
            Some(Unit::Seconds),
            MetricType::Histogram,
            process,
        )?;
        let latency = self.process_labels().map(|(l, s)| (l, ConstHistogram(&s.latency)));
        family(
            &mut e,
            "stage_latency",
            "Per frame, from its source's stamp to the end of this stage's work on it (in the cuda domain: its host's work).",
            Some(Unit::Seconds),
            MetricType::Histogram,
            latency,
        )?;
        let queued = self.link_labels().map(|(labels, l)| (labels, ConstGauge::new(l.queued as i64)));
        family(
            &mut e,
            "link_queued",
            "Frames in the link's ring the consumer has yet to read or is reading.",
            Some(Unit::Other("frames".to_owned())),
            MetricType::Gauge,
            queued,
        )?;
        let capacity = self.link_labels().map(|(labels, l)| (labels, ConstGauge::new(l.capacity as i64)));
        family(
            &mut e,
            "link_capacity",
            "Slots in the link's ring (its depth).",
            Some(Unit::Other("frames".to_owned())),
            MetricType::Gauge,
            capacity,
        )?;
        let dropped = self.link_labels().map(|(labels, l)| (labels, ConstCounter::new(l.dropped)));
        family(
            &mut e,
            "link_dropped_frames",
            "Frames the consumer missed on this link.",
            None,
            MetricType::Counter,
            dropped,
        )?;
        let lost = self.link_labels().map(|(labels, l)| (labels, ConstCounter::new(l.lost)));
        family(
            &mut e,
            "link_lost_frames",
            "Frames the consumer took from this link and lost in a process that died.",
            None,
            MetricType::Counter,
            lost,
        )?;
        let used = self.gpu_labels().map(|(labels, g)| (labels, ConstGauge::new(g.used_bytes as i64)));
        family(
            &mut e,
            "gpu_memory_used",
            "Device memory in use on the GPU, by every process, as a stage on it last read it.",
            Some(Unit::Bytes),
            MetricType::Gauge,
            used,
        )?;
        let total = self.gpu_labels().map(|(labels, g)| (labels, ConstGauge::new(g.total_bytes as i64)));
        family(&mut e, "gpu_memory_total", "The GPU's device memory.", Some(Unit::Bytes), MetricType::Gauge, total)
    }
}

/// An info metric's value: its labels say it all.
#[derive(Debug)]
struct ConstInfo;

impl EncodeMetric for ConstInfo {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let none: [(&str, &str); 0] = [];
        encoder.encode_info(&none)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Info
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{GpuSample, LinkSample, ProcessSample};

    fn sample() -> Sample {
        let mut stats = StatsSnapshot { frames: 3, busy_ns: 1_500_000_000, ..StatsSnapshot::default() };
        stats.latency.buckets[9] = 3;
        stats.latency.sum_ns = 2_400_000;
        Sample {
            pipeline: "p".into(),
            state: RunState::Running,
            not_ready: None,
            started_at: Some(1.5e9),
            processes: vec![ProcessSample {
                stage: "grade".into(),
                replica: 0,
                host: "local".into(),
                plugin: "rgb-process".into(),
                domain: "cuda".into(),
                device: "cuda:0".into(),
                up: true,
                stats,
            }],
            links: vec![LinkSample {
                link: "gen -> grade".into(),
                producer: "gen".into(),
                consumer: "grade".into(),
                host: "local".into(),
                capacity: 4,
                queued: 2,
                dropped: 0,
                lost: 0,
            }],
            gpus: vec![GpuSample { host: "local".into(), device: 0, used_bytes: 1 << 30, total_bytes: 80 << 30 }],
        }
    }

    #[test]
    fn every_family_is_exported_with_its_conventional_name() {
        let text = render(&sample());
        let declared: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(declared, METRICS);
    }

    #[test]
    fn values_are_in_base_units_and_buckets_cumulative() {
        let text = render(&sample());
        let labels = r#"pipeline="p",host="local",stage="grade",replica="0""#;
        for line in [
            format!("gpuipc_stage_busy_seconds_total{{{labels}}} 1.5"),
            format!("gpuipc_stage_latency_seconds_bucket{{{labels},le=\"0.0005\"}} 0"),
            format!("gpuipc_stage_latency_seconds_bucket{{{labels},le=\"0.001\"}} 3"),
            format!("gpuipc_stage_latency_seconds_bucket{{{labels},le=\"+Inf\"}} 3"),
            format!("gpuipc_stage_latency_seconds_sum{{{labels}}} 0.0024"),
            format!("gpuipc_stage_latency_seconds_count{{{labels}}} 3"),
            r#"gpuipc_gpu_memory_used_bytes{pipeline="p",host="local",device="cuda:0"} 1073741824"#.to_owned(),
            r#"gpuipc_link_queued_frames{pipeline="p",host="local",link="gen -> grade",producer="gen",consumer="grade"} 2"#
                .to_owned(),
            r#"gpuipc_run_state{pipeline="p",state="running"} 1"#.to_owned(),
            r#"gpuipc_run_ready{pipeline="p"} 1"#.to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "no line `{line}` in:\n{text}");
        }
    }

    #[test]
    fn a_label_value_with_quotes_and_newlines_is_escaped() {
        let mut s = sample();
        s.pipeline = "a \"b\"\nc".into();
        let text = render(&s);
        assert!(text.contains(r#"pipeline="a \"b\"\nc""#), "{text}");
    }
}
