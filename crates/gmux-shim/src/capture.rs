//! Stream capture: commands captured into a CUDA graph do not run at capture time, so
//! they pass to the driver untouched; the graph's working set is read from its nodes when
//! it is instantiated ([`crate::graph`]).
//!
//! While any capture is under way, gmux's own driver calls in the calling thread (event
//! queries, synchronizations, mapping) run in relaxed capture mode: in the default global
//! mode the driver would refuse them and invalidate the program's capture.

use crate::cuda::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Captures begun and not yet ended, process-wide.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether some stream may be capturing (one atomic load: the launch path's whole cost
/// when no program captures).
pub fn any() -> bool {
    ACTIVE.load(Ordering::Relaxed) > 0
}

/// `cuStreamBeginCapture*`: the commands released on `stream` so far get their fence
/// first (none can be recorded on it while it captures), then the call is forwarded; a
/// capture that began is counted.
pub fn begin(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool) -> CUresult {
    crate::api::command::fence_stream(stream, ptsz);
    let r = real();
    if r == CUDA_SUCCESS {
        let n = ACTIVE.fetch_add(1, Ordering::Relaxed) + 1;
        crate::log!(Debug, "stream capture begins ({n} under way)");
    }
    r
}

/// `cuStreamEndCapture`: forwarded; a capture that was under way on `stream` has ended
/// whatever the result (an invalidated capture ends with an error). A call on a stream
/// that was not capturing ends none.
pub fn end(real: impl FnOnce() -> CUresult, stream: CUstream, ptsz: bool) -> CUresult {
    let was = any() && status(stream, ptsz).is_some_and(|s| s != CU_STREAM_CAPTURE_STATUS_NONE);
    let r = real();
    if was {
        let _ = ACTIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        crate::log!(Debug, "stream capture ends with {r}");
    }
    r
}

/// The capture status of `stream`, if the driver tells it.
fn status(stream: CUstream, ptsz: bool) -> Option<u32> {
    let mut status = CU_STREAM_CAPTURE_STATUS_NONE;
    let r = if ptsz { crate::real!(cuStreamIsCapturing_ptsz(stream, &mut status)) } else { crate::real!(cuStreamIsCapturing(stream, &mut status)) };
    (r == CUDA_SUCCESS).then_some(status)
}

/// Whether a command on `stream` would be captured rather than run: the stream is
/// capturing, or its capture was invalidated, or the driver refuses to say (an implicit
/// dependency on a capturing stream), in which case the driver answers the command too.
pub fn captured(stream: CUstream, ptsz: bool) -> bool {
    any() && status(stream, ptsz) != Some(CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Runs `f` in relaxed capture mode while any capture is under way, restoring the
/// thread's mode after (also when `f` panics).
pub fn relaxed<R>(f: impl FnOnce() -> R) -> R {
    /// The thread's mode before, restored on drop.
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::real!(cuThreadExchangeStreamCaptureMode(&mut self.0));
        }
    }
    if !any() {
        return f();
    }
    let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    let _restore = (crate::real!(cuThreadExchangeStreamCaptureMode(&mut mode)) == CUDA_SUCCESS).then_some(Restore(mode));
    f()
}

/// Puts gmux's own threads in relaxed capture mode for good: they never capture, and
/// their calls must not disturb a program's capture.
pub fn relax_this_thread() {
    let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    crate::real!(cuThreadExchangeStreamCaptureMode(&mut mode));
}
