//! A stream as the application named it, for ordering: work on one stream runs in order.

use crate::cuda::*;

/// A real stream as the application named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKey {
    /// A stream handle, or the legacy default stream (`0`/`CU_STREAM_LEGACY`, kept as 1).
    Handle(usize),
    /// The per-thread default stream of one thread.
    PerThread(u64),
}

impl StreamKey {
    /// The key for `stream` as passed to a call; `ptsz` for the per-thread-default variants.
    pub fn of(stream: CUstream, ptsz: bool) -> StreamKey {
        let h = stream as usize;
        if (h == 0 && ptsz) || stream == CU_STREAM_PER_THREAD {
            // SAFETY: pthread_self has no preconditions.
            StreamKey::PerThread(unsafe { libc::pthread_self() } as u64)
        } else if h == 0 || stream == CU_STREAM_LEGACY {
            StreamKey::Handle(1)
        } else {
            StreamKey::Handle(h)
        }
    }
}
