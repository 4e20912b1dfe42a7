//! Released, unfinished commands per stream, and the last command that used each
//! allocation, so that an eviction can wait on the GPU for exactly that command.
//!
//! Every released command gets a sequence number on its stream. An event (a fence) is
//! recorded after every [`FENCE_EVERY`]th command of a stream, and at once when an
//! eviction, a report or the in-flight bound needs one for commands not yet fenced: a
//! launch whose memory is resident costs no driver call of gmux's own in between. The
//! per-thread default stream of a thread can only be named by that thread, so there a
//! fence follows every command. Fences retire in order as they complete and return to a
//! pool.

use crate::cuda::*;
use crate::driver::{check, CudaError};
pub use crate::stream::StreamKey;
use gmux_core::idhash::IdMap;
use gmux_core::AllocId;
use std::collections::VecDeque;

/// Commands of a stream between two fences recorded in passing.
pub const FENCE_EVERY: u64 = 64;

/// The stream handle a call's null stream stands for: a `_ptsz`/`_ptds` call's null
/// stream is the calling thread's default stream, which other calls name
/// `CU_STREAM_PER_THREAD`.
pub fn default_stream(stream: CUstream, ptsz: bool) -> CUstream {
    if ptsz && stream.is_null() {
        CU_STREAM_PER_THREAD
    } else {
        stream
    }
}

#[derive(Debug, Default)]
struct Track {
    /// The sequence number of the next command.
    next: u64,
    /// Every command below this sequence number has completed.
    done: u64,
    /// Fences in order: each completes once every command below its number has.
    fences: VecDeque<(u64, CUevent)>,
}

impl Track {
    /// Commands after the newest fence.
    fn unfenced(&self) -> u64 {
        self.next - self.fences.back().map_or(self.done, |f| f.0)
    }
}

/// A released command's position: its stream and sequence number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    key: StreamKey,
    seq: u64,
}

/// In-flight commands of every stream.
#[derive(Debug, Default)]
pub struct Inflight {
    tracks: IdMap<StreamKey, Track>,
    last_use: IdMap<AllocId, (StreamKey, u64)>,
    pool: Vec<CUevent>,
    /// Commands of other devices over this device's memory.
    pub held: crate::held::Held,
}

// SAFETY: CUDA events may be used from any thread; the shim serializes access.
unsafe impl Send for Inflight {}

impl Inflight {
    /// Records that a command touching `allocs` was just released on `stream`. Returns,
    /// when more than `bound` commands of that stream are unfinished, the event to wait
    /// for before the next launch; the caller waits without the state lock (the daemon
    /// agent may need it meanwhile).
    pub fn released(&mut self, stream: CUstream, ptsz: bool, allocs: &[AllocId], bound: usize) -> Result<Option<CUevent>, CudaError> {
        let key = StreamKey::of(stream, ptsz);
        let bound = bound.max(1) as u64;
        let every = if matches!(key, StreamKey::PerThread(_)) { 1 } else { FENCE_EVERY.min(bound) };
        let t = self.tracks.entry(key).or_default();
        let seq = t.next;
        t.next += 1;
        let (fence_now, over) = (t.unfenced() >= every, t.next - t.done > bound);
        for a in allocs {
            self.last_use.insert(*a, (key, seq));
        }
        if fence_now {
            self.fence(key, stream)?;
        }
        if !(fence_now || over) {
            return Ok(None);
        }
        self.retire(key, usize::MAX)?;
        let t = &self.tracks[&key];
        if t.next - t.done <= bound {
            return Ok(None);
        }
        // Over the bound: the oldest fence after which at most `bound` are unfinished.
        let enough = t.next - bound;
        match t.fences.iter().find(|f| f.0 >= enough) {
            Some(f) => Ok(Some(f.1)),
            None => self.fence(key, stream).map(Some),
        }
    }

    /// Records a fence after the commands released so far on `key` (named `stream` by
    /// the caller, or by its key alone) and returns it.
    fn fence(&mut self, key: StreamKey, stream: CUstream) -> Result<CUevent, CudaError> {
        let ev = match self.pool.pop() {
            Some(e) => e,
            None => {
                let mut e = std::ptr::null_mut();
                check(crate::real!(cuEventCreate(&mut e, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
                e
            }
        };
        let r = match key {
            StreamKey::PerThread(_) => crate::real!(cuEventRecord_ptsz(ev, std::ptr::null_mut())),
            StreamKey::Handle(h) if stream.is_null() => crate::real!(cuEventRecord(ev, h as CUstream)),
            StreamKey::Handle(_) => crate::real!(cuEventRecord(ev, stream)),
        };
        if let Err(e) = check(r, "cuEventRecord") {
            self.pool.push(ev);
            return Err(e);
        }
        let t = self.tracks.get_mut(&key).expect("a fenced stream has a track");
        t.fences.push_back((t.next, ev));
        Ok(ev)
    }

    /// Fences the unfenced commands of every stream. Where a fence cannot be recorded (a
    /// per-thread default stream seen from another thread, or a failed call), waits for
    /// the whole context instead: every command is then done.
    fn fence_all(&mut self) -> Result<(), CudaError> {
        let keys: Vec<StreamKey> = self.tracks.iter().filter(|(_, t)| t.unfenced() > 0).map(|(k, _)| *k).collect();
        for k in keys {
            if matches!(k, StreamKey::PerThread(_)) || self.fence(k, std::ptr::null_mut()).is_err() {
                return self.settle_all();
            }
        }
        Ok(())
    }

    /// Waits for the whole context: every command released so far is done.
    fn settle_all(&mut self) -> Result<(), CudaError> {
        check(crate::real!(cuCtxSynchronize()), "cuCtxSynchronize")?;
        for t in self.tracks.values_mut() {
            self.pool.extend(t.fences.drain(..).map(|f| f.1));
            t.done = t.next;
        }
        Ok(())
    }

    /// Forgets the finished commands of stream `key`, waiting until at most `bound`
    /// fences are unfinished. A stream gmux has released nothing on has nothing to retire.
    fn retire(&mut self, key: StreamKey, bound: usize) -> Result<(), CudaError> {
        let Some(t) = self.tracks.get_mut(&key) else { return Ok(()) };
        while let Some(&(upto, ev)) = t.fences.front() {
            if t.fences.len() > bound {
                check(crate::real!(cuEventSynchronize(ev)), "cuEventSynchronize")?;
            } else if crate::real!(cuEventQuery(ev)) != CUDA_SUCCESS {
                break;
            }
            t.fences.pop_front();
            t.done = upto;
            self.pool.push(ev);
        }
        Ok(())
    }

    /// The event after which no released command uses `a`, if one may still be running
    /// (recorded now if those commands have no fence yet).
    pub fn busy(&mut self, a: AllocId) -> Result<Option<CUevent>, CudaError> {
        if let Some(ev) = self.held.busy(a) {
            return Ok(Some(ev));
        }
        let Some(&(key, seq)) = self.last_use.get(&a) else { return Ok(None) };
        let Some(t) = self.tracks.get(&key) else { return Ok(None) };
        if seq < t.done {
            return Ok(None);
        }
        if let Some(f) = t.fences.iter().find(|f| f.0 > seq) {
            return Ok(Some(f.1));
        }
        if matches!(key, StreamKey::PerThread(_)) || self.fence(key, std::ptr::null_mut()).is_err() {
            return self.settle_all().map(|_| None);
        }
        Ok(self.tracks[&key].fences.back().map(|f| f.1))
    }

    /// The last released command that used `a`, as a position to test with
    /// [`Inflight::passed`]; `None` when no released command used it.
    pub fn last_use(&self, a: AllocId) -> Option<Ticket> {
        self.last_use.get(&a).map(|&(key, seq)| Ticket { key, seq })
    }

    /// Whether the command at `t` is known to have finished, from the fences recorded so
    /// far (polled, never waited for; no fence is recorded).
    pub fn passed(&mut self, t: Ticket) -> Result<bool, CudaError> {
        if !self.seen_passed(t) {
            self.retire(t.key, usize::MAX)?;
        }
        Ok(self.seen_passed(t))
    }

    /// Polls every stream's oldest fences once (never waits, records nothing), so that
    /// [`Inflight::seen_passed`] answers from what is known now.
    pub fn poll(&mut self) -> Result<(), CudaError> {
        let keys: Vec<StreamKey> = self.tracks.iter().filter(|(_, t)| t.done < t.next).map(|(k, _)| *k).collect();
        for k in keys {
            self.retire(k, usize::MAX)?;
        }
        Ok(())
    }

    /// Whether the command at `t` was seen finished, without asking the driver.
    pub fn seen_passed(&self, t: Ticket) -> bool {
        self.tracks.get(&t.key).is_none_or(|k| t.seq < k.done)
    }

    /// Waits until the command at `t` has finished, fencing its stream if no fence covers
    /// it yet.
    pub fn wait(&mut self, t: Ticket) -> Result<(), CudaError> {
        if self.passed(t)? {
            return Ok(());
        }
        let track = &self.tracks[&t.key];
        let ev = match track.fences.iter().find(|f| f.0 > t.seq) {
            Some(f) => f.1,
            None if matches!(t.key, StreamKey::PerThread(_)) => return self.settle_all(),
            None => self.fence(t.key, std::ptr::null_mut())?,
        };
        check(crate::real!(cuEventSynchronize(ev)), "cuEventSynchronize")?;
        self.retire(t.key, usize::MAX)
    }

    /// The newest fence of every stream with unfinished commands, fencing what has none,
    /// and the events of other devices' commands over this device's memory: waiting for
    /// all of them waits for everything released so far.
    pub fn newest(&mut self) -> Vec<CUevent> {
        if let Err(e) = self.fence_all() {
            crate::log!(Error, "cannot fence the commands released so far ({e}): the context is broken");
        }
        let mut v: Vec<CUevent> = self.tracks.values().filter(|t| t.done < t.next).filter_map(|t| t.fences.back().map(|f| f.1)).collect();
        v.extend(self.held.running());
        v
    }

    /// Commands known finished so far, all streams, without asking the device.
    pub fn done(&self) -> u64 {
        self.tracks.values().map(|t| t.done).sum()
    }

    /// Commands seen finished so far, all streams (fences what has none, and polls
    /// without waiting).
    pub fn finished(&mut self) -> Result<u64, CudaError> {
        self.fence_all()?;
        let keys: Vec<StreamKey> = self.tracks.keys().copied().collect();
        for k in keys {
            self.retire(k, usize::MAX)?;
        }
        Ok(self.tracks.values().map(|t| t.done).sum())
    }

    /// Whether no released command is known to be unfinished.
    pub fn idle(&self) -> bool {
        self.tracks.values().all(|t| t.done == t.next) && self.held.is_empty()
    }

    /// Whether commands were released on `stream`.
    pub fn tracks(&self, stream: CUstream, ptsz: bool) -> bool {
        self.tracks.contains_key(&StreamKey::of(stream, ptsz))
    }

    /// Streams that have had commands.
    pub fn streams(&self) -> usize {
        self.tracks.len()
    }

    /// Forgets a freed allocation.
    pub fn forget(&mut self, a: AllocId) {
        self.last_use.remove(&a);
    }

    /// Fences the commands released so far on `stream`, before a capture begins on it or
    /// it is destroyed: no fence is recorded on it in passing after that.
    pub fn fence_stream(&mut self, stream: CUstream, ptsz: bool) -> Result<(), CudaError> {
        let key = StreamKey::of(stream, ptsz);
        match self.tracks.get(&key) {
            Some(t) if t.unfenced() > 0 => self.fence(key, stream).map(|_| ()),
            _ => Ok(()),
        }
    }

    /// Commands of `stream` finished (after a synchronize of it).
    pub fn synced(&mut self, stream: CUstream, ptsz: bool) -> Result<(), CudaError> {
        let key = StreamKey::of(stream, ptsz);
        self.retire(key, 0)?;
        if let Some(t) = self.tracks.get_mut(&key) {
            t.done = t.next;
        }
        Ok(())
    }

    /// Every stream finished (after a context synchronize).
    pub fn synced_all(&mut self) -> Result<(), CudaError> {
        let keys: Vec<StreamKey> = self.tracks.keys().copied().collect();
        for k in keys {
            self.retire(k, 0)?;
            let t = self.tracks.get_mut(&k).expect("listed");
            t.done = t.next;
        }
        Ok(())
    }
}
