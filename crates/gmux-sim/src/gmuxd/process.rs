//! A simulated tenant process: what the shim does on a GPU (each command made resident by
//! gmux-runtime, then released; the host runs ahead of the GPU up to a bound, and waits
//! at the end of each task) and what its agent does for the daemon (the switch state
//! machine's shrink and fill steps), in simulated time.

use super::device::ProcessDevice;
use crate::engine::TenantOutcome;
use crate::workload::{Command, Source};
use gmux_core::device::CopyStream;
use gmux_core::protocol::{Fill, Grant, ShimReport};
use gmux_core::AllocId;
use gmux_runtime::switch::{Action, Edge, Switch};
use gmux_runtime::{Error, Settings, TenantMemory};
use std::collections::VecDeque;

/// Most released, unfinished commands of a process (the shim's default bound).
const INFLIGHT: usize = 256;
/// Most steps the agent takes at one instant before it reports (it reports after each on a
/// GPU; here the daemon sees the last).
const STEPS_AT_ONCE: usize = 64;

/// A released command: when it ends on the GPU and whether it ends a task.
#[derive(Debug, Clone, Copy)]
struct Released {
    end: f64,
    task_end: bool,
}

/// One tenant's process.
pub struct Process {
    mem: TenantMemory<ProcessDevice>,
    allocs: Vec<AllocId>,
    source: Box<dyn Source>,
    next: Option<Command>,
    grant: Grant,
    generation: u64,
    /// Launches may proceed.
    open: bool,
    switch: Switch<f64>,
    /// The agent waits for copies until then.
    agent_until: f64,
    /// The application's thread is held in the shim until then, which finishes the unmap
    /// of an address it maps again (its eviction copy) first.
    host_until: f64,
    inflight: VecDeque<Released>,
    finished: u64,
    /// Bytes a command waits to have granted.
    blocked: u64,
    /// What it achieved.
    pub out: TenantOutcome,
    /// Why it stopped early.
    pub failed: Option<String>,
}

impl Process {
    /// A process of `source` on `dev` under its first grant `g`; its allocations are made
    /// at once, resident on first use.
    pub fn new(dev: ProcessDevice, mut source: Box<dyn Source>, settings: Settings, g: Grant) -> Result<Self, String> {
        let mut mem = TenantMemory::new(dev, g.cap, settings);
        let allocs = source.allocs().iter().map(|a| mem.allocate(a.bytes).map_err(|e| format!("{e:?}"))).collect::<Result<Vec<_>, _>>()?;
        let next = source.next();
        let open = g.run && g.fill != Fill::Whole;
        Ok(Process {
            mem,
            allocs,
            source,
            next,
            grant: g,
            generation: 0,
            open,
            switch: Switch::default(),
            agent_until: 0.0,
            host_until: 0.0,
            inflight: VecDeque::new(),
            finished: 0,
            blocked: 0,
            out: TenantOutcome::default(),
            failed: None,
        })
    }

    /// Takes grant `g`: a pause closes the gate before the next launch.
    pub fn take(&mut self, g: Grant) {
        self.open = g.run && (self.open || g.fill != Fill::Whole);
        self.grant = g;
        self.generation += 1;
    }

    /// The runtime's totals.
    pub fn stats(&self) -> gmux_runtime::Stats {
        self.mem.stats
    }

    /// Bytes copied host to device and back so far.
    pub fn bytes_moved(&self) -> (u64, u64) {
        let m = self.mem.stats.moved;
        (m.populated * gmux_core::CHUNK_BYTES, m.evicted * gmux_core::CHUNK_BYTES)
    }

    /// Retires the commands done by `now`, counting the tasks that end by `until`.
    pub fn retire(&mut self, now: f64, until: f64) {
        while let Some(c) = self.inflight.front().copied().filter(|c| c.end <= now) {
            self.inflight.pop_front();
            self.finished += 1;
            if c.task_end && c.end <= until {
                self.out.tasks += 1;
            }
        }
    }

    /// The agent's steps at `now`, as long as each leaves more to do at once.
    pub fn agent(&mut self, now: f64) -> Result<(), String> {
        for _ in 0..STEPS_AT_ONCE {
            if self.agent_until > now || !self.agent_step(now)? {
                break;
            }
        }
        Ok(())
    }

    /// One move of the switch state machine; returns whether another follows at once.
    fn agent_step(&mut self, now: f64) -> Result<bool, String> {
        self.mem.dev.begin_agent(now);
        if let Some(Edge::Out { released }) = self.switch.observe(self.grant.run, self.mem.stats.commands) {
            self.mem.slot_ended(released);
        }
        let mut view = self.mem.view(self.grant.cap, self.grant.fill, self.generation);
        if let Some(limit) = self.switch.raise(&view) {
            self.mem.set_limit(limit);
            view.limit = limit;
        }
        let fence: Vec<f64> = self.inflight.back().map(|c| c.end).into_iter().collect();
        match self.switch.next(&view) {
            Action::Rest => Ok(false),
            Action::Shrink { cap } => {
                let more = self.mem.shrink_step(cap, || fence).map_err(|e| format!("{e:?}"))?;
                let done = self.mem.dev.stream_done(CopyStream::Evict);
                Ok(match self.switch.shrunk(more, done) {
                    Some(t) => {
                        self.agent_until = t.max(self.mem.dev.host_waits_until());
                        more || self.mem.limit() != cap
                    }
                    None => true,
                })
            }
            Action::Drain(t) => {
                self.agent_until = t;
                Ok(true)
            }
            Action::Fill { whole } => {
                let step = self.mem.fill_step(whole, || fence).map_err(|e| format!("{e:?}"))?;
                let (more, done) = match step {
                    None => (false, None),
                    Some(more) => (more, Some(self.mem.dev.stream_done(CopyStream::Populate))),
                };
                let (wait, complete) = self.switch.filled(more, done, self.generation);
                if let Some(t) = wait {
                    self.agent_until = t;
                }
                self.agent_until = self.agent_until.max(self.mem.dev.host_waits_until());
                if complete && whole {
                    self.open = self.grant.run;
                }
                Ok(more)
            }
        }
    }

    /// Releases what the gate, the grant and the in-flight bound allow at `now`; the GPU
    /// runs one command at a time, the next from `gpu_free`. A command whose preparation
    /// held the thread ([`ProcessDevice::host_waits_until`]) is released when it lets go,
    /// and the next ones after it.
    pub fn issue(&mut self, now: f64, gpu_free: &mut f64) -> Result<(), String> {
        while self.host_until <= now
            && self.open
            && self.failed.is_none()
            && self.inflight.len() < INFLIGHT
            && !self.inflight.back().is_some_and(|c| c.task_end)
        {
            let Some(cmd) = self.next.take() else { return Ok(()) };
            if self.blocked > self.grant.cap {
                self.next = Some(cmd);
                return Ok(());
            }
            self.blocked = 0;
            let ws = super::working_set(&cmd, &self.allocs);
            let sig = self.mem.signature(0, &ws);
            self.mem.dev.begin(now);
            let fence: Vec<f64> = self.inflight.back().map(|c| c.end).into_iter().collect();
            let (cap, most) = (self.grant.cap, self.grant.most);
            let prepared = match self.mem.prepare(&ws, Some(0), sig, || Some(cap), || fence.clone()) {
                // Larger than any grant: the excess is mapped on the host, as the shim does.
                Err(Error::NoRoom { need, .. }) if need > most => self.mem.prepare_spilled(&ws, Some(0), sig, || fence.clone()),
                r => r,
            };
            match prepared {
                Ok(events) => {
                    self.host_until = self.mem.dev.host_waits_until();
                    let ready = events.iter().map(|e| self.mem.dev.time(*e)).fold(now.max(self.host_until), f64::max);
                    let start = ready.max(*gpu_free).max(cmd.arrival_ns.unwrap_or(0.0));
                    let end = start + cmd.duration_ns;
                    *gpu_free = end;
                    self.inflight.push_back(Released { end, task_end: cmd.task_end });
                    self.mem.released(&ws, sig);
                    self.next = self.source.next();
                }
                Err(Error::NoRoom { need, .. }) if need <= self.grant.most => {
                    self.blocked = need;
                    self.next = Some(cmd);
                    return Ok(());
                }
                Err(e) => {
                    self.failed = Some(format!("{e:?}"));
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The report its agent sends.
    pub fn report(&mut self) -> ShimReport {
        let mut r = self.mem.report(self.blocked, !self.inflight.is_empty(), self.finished);
        r.grant = self.grant.seq;
        r.waiting = self.blocked > 0 || (!self.open && self.next.is_some());
        r
    }

    /// The next instant after `now` at which something of this process happens by itself.
    pub fn next_event(&self, now: f64) -> Option<f64> {
        let agent = Some(self.agent_until).filter(|t| *t > now);
        let host = Some(self.host_until).filter(|t| *t > now);
        let command = self.inflight.front().map(|c| c.end).filter(|t| *t > now);
        agent.into_iter().chain(host).chain(command).reduce(f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::SimDevice;
    use crate::model::DeviceModel;
    use crate::workload::{Access, AllocSpec};
    use std::cell::RefCell;
    use std::rc::Rc;

    const MIB: u64 = 1 << 20;
    const MS: f64 = 1e6;

    /// Commands of 1 ms over allocations A, B and C of 24 MiB in turn, each followed by
    /// one over D, of 2 MiB, which stays in.
    struct Rotation(usize);

    impl Source for Rotation {
        fn allocs(&self) -> Vec<AllocSpec> {
            let mut a = vec![AllocSpec { bytes: 24 * MIB, on_disk: false }; 3];
            a.push(AllocSpec { bytes: 2 * MIB, on_disk: false });
            a
        }
        fn next(&mut self) -> Option<Command> {
            self.0 += 1;
            let (alloc, len) = if self.0.is_multiple_of(2) { (3, 2 * MIB) } else { ((self.0 / 2) % 3, 24 * MIB) };
            let ws = vec![Access { alloc, offset: 0, len, write: true }];
            Some(Command { duration_ns: MS, ws, task_end: false, arrival_ns: None })
        }
    }

    fn process(cap: u64) -> Process {
        let dev = Rc::new(RefCell::new(SimDevice::new(DeviceModel::default())));
        let grant = Grant { cap, most: cap, run: true, fill: Fill::None, inflight: 0, seq: 1 };
        Process::new(ProcessDevice::new(dev, 0), Box::new(Rotation(0)), super::super::SETTINGS, grant).unwrap()
    }

    /// Under a 64 MiB grant A, B and C do not fit: a command over one of them evicts
    /// another after the commands in flight, and maps again the one whose eviction was the
    /// last to start. Its unmap is not done yet, so the application waits for it, as it
    /// does in the shim, and the command runs only after the wait.
    #[test]
    fn a_process_that_maps_an_address_whose_unmap_is_not_done_waits_for_it() {
        let mut p = process(64 * MIB);
        let (mut now, mut gpu_free, mut waits) = (0.0, 0.0, 0);
        while now < 20.0 * MS {
            p.retire(now, f64::INFINITY);
            let held = p.host_until > now;
            p.issue(now, &mut gpu_free).unwrap();
            // A mapping alone holds the thread for µs; a wait for an unmap, for a copy.
            if !held && p.host_until > now + 0.1 * MS {
                waits += 1;
                let end = p.inflight.back().map(|c| c.end).expect("the command that waited was released");
                assert!(end >= p.host_until + MS, "the command that waited ran after the wait: ends {end}, wait ends {}", p.host_until);
            }
            now = p.next_event(now).unwrap_or(now + MS);
        }
        assert!(waits >= 3, "{waits} waits for an unmap");
        assert!(p.finished >= 10, "it still makes progress: {} commands", p.finished);
    }

    /// While its thread is held, a process releases nothing, even a command whose memory
    /// is in; it goes on when the wait ends, held again only by the mappings of its four
    /// allocations' first uses (µs each), and runs ahead to the in-flight bound.
    #[test]
    fn a_held_process_releases_nothing_until_the_wait_ends() {
        let mut p = process(1 << 30);
        let mut gpu_free = 0.0;
        p.host_until = 5.0 * MS;
        p.issue(0.0, &mut gpu_free).unwrap();
        assert!(p.inflight.is_empty(), "released {} while held", p.inflight.len());
        assert_eq!(p.next_event(0.0), Some(5.0 * MS), "it wakes when the wait ends");
        let mut now = 5.0 * MS;
        let mut holds = 0;
        for _ in 0..2 * INFLIGHT {
            if p.inflight.len() == INFLIGHT || holds > 4 {
                break;
            }
            p.issue(now, &mut gpu_free).unwrap();
            if p.host_until > now {
                holds += 1;
                now = p.host_until;
            }
        }
        assert_eq!(p.inflight.len(), INFLIGHT, "then it runs ahead to the in-flight bound");
        assert!(holds <= 4 && now < 5.0 * MS + 0.1 * MS, "held {holds} times, until {now} ns, by mappings alone");
    }
}
