//! Released, unfinished commands per stream, and the last command that used each
//! allocation, so that an eviction can wait on the GPU for exactly that command.
//!
//! Every released command gets a sequence number on its stream and an event recorded
//! after it; events retire in order as they complete and return to a pool.

use crate::cuda::*;
use crate::driver::{check, CudaError};
pub use crate::stream::StreamKey;
use gmux_core::AllocId;
use std::collections::{HashMap, VecDeque};

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
    next: u64,
    /// Every command below this sequence number has completed.
    done: u64,
    events: VecDeque<(u64, CUevent)>,
}

/// In-flight commands of every stream.
#[derive(Debug, Default)]
pub struct Inflight {
    tracks: HashMap<StreamKey, Track>,
    last_use: HashMap<AllocId, (StreamKey, u64)>,
    pool: Vec<CUevent>,
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
        let ev = match self.pool.pop() {
            Some(e) => e,
            None => {
                let mut e = std::ptr::null_mut();
                check(crate::real!(cuEventCreate(&mut e, CU_EVENT_DISABLE_TIMING)), "cuEventCreate")?;
                e
            }
        };
        let r = if ptsz { crate::real!(cuEventRecord_ptsz(ev, stream)) } else { crate::real!(cuEventRecord(ev, stream)) };
        check(r, "cuEventRecord")?;
        let t = self.tracks.entry(key).or_default();
        let seq = t.next;
        t.next += 1;
        t.events.push_back((seq, ev));
        for a in allocs {
            self.last_use.insert(*a, (key, seq));
        }
        self.retire(key, usize::MAX)?;
        let t = &self.tracks[&key];
        Ok(t.events.len().checked_sub(bound + 1).map(|over| t.events[over].1))
    }

    /// Forgets the finished commands of stream `key`, waiting until at most `bound` are
    /// unfinished. A stream gmux has released nothing on has nothing to retire.
    fn retire(&mut self, key: StreamKey, bound: usize) -> Result<(), CudaError> {
        let Some(t) = self.tracks.get_mut(&key) else { return Ok(()) };
        while let Some(&(seq, ev)) = t.events.front() {
            if t.events.len() > bound {
                check(crate::real!(cuEventSynchronize(ev)), "cuEventSynchronize")?;
            } else if crate::real!(cuEventQuery(ev)) != CUDA_SUCCESS {
                break;
            }
            t.events.pop_front();
            t.done = seq + 1;
            self.pool.push(ev);
        }
        Ok(())
    }

    /// The event after which no released command uses `a`, if one may still be running.
    pub fn busy(&self, a: AllocId) -> Option<CUevent> {
        let (key, seq) = *self.last_use.get(&a)?;
        let t = self.tracks.get(&key)?;
        if seq < t.done {
            return None;
        }
        let i = t.events.binary_search_by_key(&seq, |(s, _)| *s).ok()?;
        Some(t.events[i].1)
    }

    /// The newest unfinished command's event on every stream: waiting for all of them
    /// waits for everything released so far.
    pub fn newest(&self) -> Vec<CUevent> {
        self.tracks.values().filter_map(|t| t.events.back().map(|(_, e)| *e)).collect()
    }

    /// Commands seen finished so far, all streams (polls without waiting).
    pub fn finished(&mut self) -> Result<u64, CudaError> {
        let keys: Vec<StreamKey> = self.tracks.keys().copied().collect();
        for k in keys {
            self.retire(k, usize::MAX)?;
        }
        Ok(self.tracks.values().map(|t| t.done).sum())
    }

    /// Whether no released command is known to be unfinished.
    pub fn idle(&self) -> bool {
        self.tracks.values().all(|t| t.events.is_empty())
    }

    /// Streams that have had commands.
    pub fn streams(&self) -> usize {
        self.tracks.len()
    }

    /// Forgets a freed allocation.
    pub fn forget(&mut self, a: AllocId) {
        self.last_use.remove(&a);
    }

    /// Commands of `stream` finished (after a synchronize of it).
    pub fn synced(&mut self, stream: CUstream, ptsz: bool) -> Result<(), CudaError> {
        self.retire(StreamKey::of(stream, ptsz), 0)
    }

    /// Every stream finished (after a context synchronize).
    pub fn synced_all(&mut self) -> Result<(), CudaError> {
        let keys: Vec<StreamKey> = self.tracks.keys().copied().collect();
        keys.into_iter().try_for_each(|k| self.retire(k, 0))
    }
}
