//! Streams and events: the special stream handles, creation and record/wait flags, and
//! the modes and statuses of stream capture.

use crate::CUstream;

/// The legacy default stream, usable from any thread.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// The calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// `cuStreamCreate` flag: no implicit synchronization with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: u32 = 0x1;
/// `cuEventCreate` flag: no timing data (cheaper).
pub const CU_EVENT_DISABLE_TIMING: u32 = 0x2;
/// `cuEventRecordWithFlags` flag: during capture, add an event record node.
pub const CU_EVENT_RECORD_EXTERNAL: u32 = 0x1;
/// `cuStreamWaitEvent` flag: during capture, add an event wait node.
pub const CU_EVENT_WAIT_EXTERNAL: u32 = 0x1;

/// `CUstreamCaptureMode`.
pub const CU_STREAM_CAPTURE_MODE_GLOBAL: u32 = 0;
pub const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: u32 = 1;
pub const CU_STREAM_CAPTURE_MODE_RELAXED: u32 = 2;
/// `CUstreamCaptureStatus`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: u32 = 0;
pub const CU_STREAM_CAPTURE_STATUS_ACTIVE: u32 = 1;
pub const CU_STREAM_CAPTURE_STATUS_INVALIDATED: u32 = 2;
