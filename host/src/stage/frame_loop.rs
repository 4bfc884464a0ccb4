//! The frame loop of a stage: take aligned inputs, take an output slot, run the plugin,
//! publish, release, count.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gpuipc_plugin_api::abi::{RawFrame, RawProcessContext};

use super::error::StageError;
use super::inputs::acquire_aligned;
use super::measure::{Phase, now_ns};
use super::output::Output;
use super::replica::Take;
use crate::gpu::Gpu;
use crate::link::backing::ReadEnd;
use crate::link::queue::{Held, Turn};
use crate::link::stats::{PHASE_FLUSH, PHASE_PROCESS, PHASE_WAITING_INPUT, PHASE_WAITING_OUTPUT};
use crate::link::{Consumer, ReadSlot, StatsMap, stats};
use crate::plugin::{Instance, PluginCallError, Processed};

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// Every input reached end of stream.
    EndOfStream,
    /// A source emitted its frame count.
    FrameCount,
    /// A source was told to stop (Ctrl-C or SIGTERM at the host).
    Stopped,
    /// A source's plugin ended its stream (`OutputFrame::end_stream`: its file ran out).
    SourceEnded,
}

pub struct FrameLoop<'a, 'p> {
    /// Waits for a restarted neighbour's new GPU objects, for a stage with GPU links.
    pub follow: Option<super::follow::Follower<'a>>,
    pub instance: Instance<'p>,
    /// How each input is read (host memory, staged copy, GPU memory), parallel to `inputs`.
    /// Declared before `inputs` so it drops first: a staged end unregisters pinned memory of
    /// the input's ring, which must still be mapped then.
    pub input_ends: Vec<Box<dyn ReadEnd>>,
    pub inputs: Vec<Consumer>,
    /// The stage's GPU context and stream, in the cuda domain.
    pub gpu: Option<Arc<Gpu>>,
    pub output: Output,
    pub stats: &'a StatsMap,
    /// A source's frame count: it ends its stream before sequence number `frames`.
    pub frames: Option<u64>,
    /// Where this process carries on: a source's next sequence number, and the frame index
    /// the plugin sees next (both 0 unless the stage was restarted).
    pub first_seq: u64,
    pub first_index: u64,
    /// `run --checksums`: a hash of every output frame.
    pub tap: Option<super::tap::Tap>,
    pub cpu: super::measure::CpuClock,
    /// A cuda stage's reading of its GPU's memory.
    pub gpu_memory: Option<super::measure::GpuMemory>,
    /// `gpuipc-host bench`: when each frame's work was done, for a stage nobody reads.
    pub latency: Option<super::measure::LatencyLog>,
    /// A source's pace (`gpuipc-host bench`).
    pub pace: Option<super::measure::Pace>,
    pub phases: super::measure::PhaseClock,
    /// `GPUIPC_NVTX=1` in a cuda stage: a range per frame around its plugin's call.
    pub nvtx: Option<super::measure::FrameRanges>,
    /// Set when this process is one of its stage's replicas.
    pub replica: Option<super::replica::Replica>,
    /// A cuda stage's bound on how far its host runs ahead of its GPU.
    pub lead: Option<super::gpu_lead::GpuLead>,
    /// A source that starts a frame after being idle this long wakes its consumers ahead
    /// (`super::wake_ahead`); with when its last frame ended (ns since the epoch).
    pub wake_ahead_after_idle: Option<u64>,
    pub last_end_ns: u64,
    /// Wake-ups of sleeping neighbours held back (cuda stages), sent before this stage waits
    /// for anything: its rings' waits do so themselves, the pace and the lead bound here.
    pub held_wakes: Option<Arc<crate::link::wakes::HeldWakes>>,
}

/// What became of one frame.
enum Done {
    /// Made, published and counted under `seq` (a source that relays frames chooses it).
    Made { seq: u64 },
    /// A source ended its stream instead of making the frame.
    SourceEnded,
    /// A replica gave the frame back for a sibling's owed one to go first.
    Yielded,
    /// A live source had no frame yet: nothing was made, the number stays unused.
    NoFrame,
}

impl FrameLoop<'_, '_> {
    pub fn run(&mut self) -> Result<LoopEnd, StageError> {
        // On a failure the stream is not over: the host either restarts this stage, which
        // carries on where this process stopped, or aborts every ring.
        let end = self.frames_until_end();
        self.flush_wakes();
        self.phases.write_trace();
        let end = end?;
        if end == LoopEnd::EndOfStream {
            self.settle_inputs_at_end();
        }
        // Replicas: the last one to end closes the stream, once every sibling has published;
        // each waits for its own GPU slots to be read.
        let end_stream = self.replica.as_ref().is_none_or(|r| self.last_replica_ends(r));
        self.output.close(end_stream)?;
        self.stats.set_phase(PHASE_FLUSH, 0);
        self.instance.flush().map_err(|error| StageError::Plugin { during: "flush", frame: None, error })?;
        if let Some(tap) = &mut self.tap {
            tap.finish().map_err(StageError::Setup)?;
        }
        self.cpu.store(self.stats);
        self.phases.log();
        if let Some(latency) = &self.latency {
            latency.finish()?;
        }
        Ok(end)
    }

    /// This replica has ended; `true` when it was the last, after giving up what is still
    /// owed (frames of siblings that died and will not come back).
    fn last_replica_ends(&self, replica: &super::replica::Replica) -> bool {
        if !replica.queue.replica_ended(replica.index) {
            return false;
        }
        for owed in replica.queue.abandon_all_owed() {
            tracing::debug!("the last replica ends: owed frame {} given up", owed.seq);
            for input in &self.inputs {
                if let Some(slot) = input.claim_seq(owed.seq) {
                    drop(slot);
                }
                input.count_dropped(1);
            }
        }
        true
    }

    fn frames_until_end(&mut self) -> Result<LoopEnd, StageError> {
        let mut index = self.first_index;
        let mut next_source_seq = self.first_seq;
        // Room for a frame's input slots and their raw frames, reused from frame to frame (a
        // tiny frame costs well under a µs: two allocations a frame were a tenth of it).
        let mut spare: Vec<ReadSlot> = Vec::with_capacity(self.inputs.len());
        let mut raw_inputs: Vec<RawFrame> = Vec::with_capacity(self.inputs.len());
        loop {
            // The time since the last frame's publish: counting it, releasing its inputs.
            self.phases.lap(Phase::Release);
            // A source's frames are stamped when it starts making them (`None` here).
            let mut ticket = None;
            let (seq, source_timestamp, held) = if self.inputs.is_empty() {
                if self.frames.is_some_and(|n| next_source_seq >= n) {
                    return Ok(LoopEnd::FrameCount);
                }
                if self.stats.get().stop.load(Ordering::Relaxed) != stats::RUN {
                    return Ok(LoopEnd::Stopped);
                }
                if let Some(pace) = &mut self.pace {
                    if let Some(held) = &self.held_wakes {
                        held.flush();
                    }
                    pace.wait_for_turn();
                }
                next_source_seq += 1;
                (next_source_seq - 1, None, Vec::new())
            } else if let Some(replica) = &self.replica {
                self.stats.set_phase(PHASE_WAITING_INPUT, 0);
                match replica.take(&mut self.inputs)? {
                    Take::End => return Ok(LoopEnd::EndOfStream),
                    Take::Frames(held, taken) => {
                        ticket = Some(taken);
                        (held[0].meta().seq, Some(held[0].meta().timestamp_ns), held)
                    }
                }
            } else {
                self.stats.set_phase(PHASE_WAITING_INPUT, 0);
                match acquire_aligned(&mut self.inputs, std::mem::take(&mut spare))? {
                    None => return Ok(LoopEnd::EndOfStream),
                    Some(held) => (held[0].meta().seq, Some(held[0].meta().timestamp_ns), held),
                }
            };
            self.phases.lap(Phase::WaitInput);
            if let Some(follow) = &mut self.follow
                && !follow.inputs_current(self.stats, &self.inputs, &held, &mut self.input_ends, &mut self.output)?
            {
                // A frame a dead producer process made: its GPU work may never have run. It is
                // not read; taken and not done, it counts as lost (once: see `lost_below`).
                let s = self.stats.get();
                s.lost.fetch_add(1, Ordering::Relaxed);
                s.lost_below.fetch_max(seq + 1, Ordering::Release);
                for input in &self.inputs {
                    input.count_lost();
                }
                if let (Some(replica), Some(taken)) = (&self.replica, ticket) {
                    // Nothing will be published under its ticket: the turn passes it.
                    replica.lost(taken);
                }
                index += 1;
                continue;
            }
            self.cpu.frame(self.stats);
            if let Some(memory) = &mut self.gpu_memory {
                memory.frame(self.stats);
            }
            // On an error the held frames drop here, released; the host counts the frame lost.
            let seq = match self.process_one(index, seq, source_timestamp, &held, &mut raw_inputs, ticket)? {
                Done::Made { seq } => seq,
                Done::SourceEnded => return Ok(LoopEnd::SourceEnded),
                Done::NoFrame => {
                    // Its camera is away: alive, not stuck (see `abi::STATUS_NO_FRAME`). The
                    // stop is looked for before the next call.
                    self.stats.pulse();
                    next_source_seq = seq;
                    continue;
                }
                Done::Yielded => {
                    let (replica, taken) =
                        (self.replica.as_ref().expect("only replicas yield"), ticket.expect("with a ticket"));
                    replica.give_back(held, taken);
                    continue;
                }
            };
            index += 1;
            if self.inputs.is_empty() {
                // A relayed frame may have skipped numbers: the next one follows it.
                next_source_seq = seq + 1;
            }
            // Releases the input slots.
            spare = held;
            spare.clear();
            self.phases.frame_done();
        }
    }

    /// Run the plugin on one frame, publish its output and count it done. Two clock
    /// reads a frame: they stamp a source's frames, time the plugin (busy) and mark the
    /// stage's first and last frame, which matters when a frame costs 0.5 µs.
    fn process_one(
        &mut self,
        index: u64,
        seq: u64,
        source_timestamp: Option<u64>,
        held: &[ReadSlot],
        inputs: &mut Vec<RawFrame>,
        ticket: Option<Held>,
    ) -> Result<Done, StageError> {
        let gpu = self.gpu.as_ref();
        inputs.clear();
        for ((input, end), slot) in self.inputs.iter().zip(&self.input_ends).zip(held) {
            inputs.push(end.frame(input.ring(), slot, input.held_wakes())?);
        }
        self.phases.lap(Phase::OpenInput);
        self.stats.set_phase(PHASE_WAITING_OUTPUT, seq);
        let pending = self.output.acquire()?;
        self.phases.lap(Phase::WaitOutput);
        if let Some(follow) = &mut self.follow {
            follow.output_current(self.stats, &mut self.input_ends, &mut self.output)?;
        }
        self.output.prepare(&pending)?;
        self.phases.lap(Phase::PrepareOutput);
        self.stats.set_phase(PHASE_PROCESS, seq);
        let started_ns = now_ns();
        if self.inputs.is_empty()
            && self.wake_ahead_after_idle.is_some_and(|idle| started_ns.saturating_sub(self.last_end_ns) > idle)
        {
            self.output.wake_ahead();
        }
        let timestamp_ns = source_timestamp.unwrap_or(started_ns);
        let mut out = self.output.raw_frame(&pending, seq, timestamp_ns);
        let stream = gpu.map_or(std::ptr::null_mut(), |g| g.stream_ptr());
        let ctx = RawProcessContext { frame_index: index, cuda_stream: stream };
        // The input slots are claimed and the output slot is ours until publish, so the
        // memory the raw frames point at stays valid and unshared for the call.
        let range = self.nvtx.as_ref().map(|n| n.frame(seq));
        let result = self.instance.process(inputs, out.as_mut(), &ctx);
        drop(range);
        let ended_ns = now_ns();
        self.last_end_ns = ended_ns;
        self.phases.lap(Phase::Process);
        // Waiting for a camera is not work: a call that made no frame counts no busy time.
        if !matches!(result, Ok(Processed::NoFrame)) {
            self.stats.plugin_called(started_ns, ended_ns);
        }
        match result {
            Ok(Processed::Frame) => {}
            Ok(Processed::NoFrame) => {
                // Nothing was made: the slot goes back unpublished and `seq` stays unused.
                self.output.cancel(pending);
                if !self.inputs.is_empty() {
                    return Err(StageError::Plugin { during: "process", frame: Some(seq), error: only_sources_wait() });
                }
                return Ok(Done::NoFrame);
            }
            Ok(Processed::Damaged) => {
                self.stats.get().damaged.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Processed::EndOfStream) => {
                // Nothing was made: the slot goes back unpublished and `seq` stays unused.
                self.output.cancel(pending);
                if !self.inputs.is_empty() {
                    return Err(StageError::Plugin { during: "process", frame: Some(seq), error: only_sources_end() });
                }
                return Ok(Done::SourceEnded);
            }
            Err(error) => {
                self.output.cancel(pending);
                return Err(StageError::Plugin { during: "process", frame: Some(seq), error });
            }
        }
        // A source passing on frames made elsewhere gave this one its own number and time.
        let (seq, timestamp_ns) = match out.as_ref() {
            Some(raw) if self.inputs.is_empty() && self.instance.may_relay() => {
                if raw.seq < seq {
                    self.output.cancel(pending);
                    return Err(StageError::RelayedBackwards { relayed: raw.seq, expected: seq });
                }
                if self.instance.is_live() {
                    // A live source's skipped numbers are frames it could not hand on.
                    self.stats.get().dropped.fetch_add(raw.seq - seq, Ordering::Relaxed);
                }
                (raw.seq, raw.timestamp_ns)
            }
            _ => (seq, timestamp_ns),
        };
        self.phases.frame_is(seq, timestamp_ns);
        for (end, slot) in self.input_ends.iter().zip(held) {
            end.done(slot.index())?;
        }
        self.phases.lap(Phase::CloseInput);
        self.output.finish(&pending)?;
        self.phases.lap(Phase::FinishOutput);
        // A replica publishes in its turn (ticket order), or yields it to an owed frame.
        let turn = match (&self.replica, ticket) {
            (Some(replica), Some(taken)) if self.output.has_ring() => Some((replica, taken)),
            _ => None,
        };
        if let Some((replica, taken)) = turn
            && replica.wait_turn(taken, || self.inputs.iter().any(|c| c.ring().is_aborted()))? == Turn::Yield
        {
            self.output.cancel(pending);
            return Ok(Done::Yielded);
        }
        if let Some(tap) = &mut self.tap {
            let hash = self.output.pixel_hash(gpu, out.as_ref())?;
            tap.record(seq, hash).map_err(StageError::Setup)?;
        }
        self.phases.publishing();
        // The frame's birth: a source's is now (a relayed stamp may be a media time); a
        // join's, its oldest input's, whose wait the frame's latency includes.
        // A live source's stamp is its frame's birth on this host's clock (its arrival).
        let own_birth =
            if self.inputs.is_empty() && self.instance.is_live() { timestamp_ns.min(ended_ns) } else { started_ns };
        let born_ns = held.iter().map(|slot| slot.meta().born_ns).min().unwrap_or(own_birth);
        self.output.publish(pending, seq, timestamp_ns, born_ns);
        // Counted done right after the publish, before a replica moves the turn on and before
        // the inputs are released: see `StageStats::last_seq_plus_one` and the host's
        // `supervisor::reclaim`, which finishes the count of a process killed in between.
        self.count(seq, ended_ns);
        // In the cuda domain the work was enqueued by `ended_ns`, not done: the histograms say
        // when this stage's host was done with the frame, at no cost of waiting for the GPU.
        self.stats.frame_timed(ended_ns.saturating_sub(started_ns), ended_ns.saturating_sub(born_ns));
        match (&self.replica, ticket) {
            (Some(replica), Some(taken)) if turn.is_some() => replica.finish(taken),
            (Some(replica), Some(_)) => replica.queue.release(replica.index),
            _ => {}
        }
        self.phases.lap(Phase::Publish);
        if let Some(latency) = &mut self.latency {
            latency.frame_done(timestamp_ns)?;
        }
        self.phases.lap(Phase::Measure);
        if let Some(lead) = &mut self.lead {
            let held = self.held_wakes.as_deref();
            lead.frame_enqueued(index, || held.map_or((), |h| h.flush()))?;
        }
        Ok(Done::Made { seq })
    }

    /// Send the wake-ups this stage held back.
    fn flush_wakes(&self) {
        if let Some(held) = &self.held_wakes {
            held.flush();
        }
    }

    fn count(&self, seq: u64, ended_ns: u64) {
        self.stats.frame_done(seq, ended_ns);
        self.store_dropped();
    }

    /// The frames this stage missed, from its input links' counts. A frame missed on several
    /// inputs (a join passing over one number on each) counts once: the stage's count is the
    /// most any one input missed; each link's own count is in the run's report. Replicas
    /// share their inputs' counts: the first one reports them, so a sum over the stage's
    /// processes counts each drop once.
    fn store_dropped(&self) {
        // A source has no inputs; a live one counts its own drops (`process_one`).
        if self.inputs.is_empty() {
            return;
        }
        if self.replica.as_ref().is_none_or(|r| r.index == 0) {
            let dropped = self.inputs.iter().map(|c| c.dropped()).max().unwrap_or(0);
            self.stats.get().dropped.store(dropped, Ordering::Relaxed);
        }
    }

    /// Every input ended: what was published on them and never taken is dropped.
    fn settle_inputs_at_end(&mut self) {
        for input in &mut self.inputs {
            input.settle_at_end();
        }
        self.store_dropped();
    }
}

/// A stage with inputs said end of stream: only a source's stream ends that way (a filter's
/// or a sink's ends when its inputs' do).
pub fn only_sources_end() -> PluginCallError {
    PluginCallError::Error(
        "ended its stream (OutputFrame::end_stream), which only a source (a stage without inputs) may do".into(),
    )
}

/// A stage with inputs said it had no frame yet: only a live source may (its inputs' frames
/// are there to be made into one).
pub fn only_sources_wait() -> PluginCallError {
    PluginCallError::Error(
        "had no frame yet (OutputFrame::no_frame_yet), which only a live source (a stage without inputs) may say"
            .into(),
    )
}
