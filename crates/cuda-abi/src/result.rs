//! `CUresult` and the error codes gmux returns or checks.

/// `CUresult`.
pub type CUresult = i32;

pub const CUDA_SUCCESS: CUresult = 0;
/// The driver is shutting down (the process is exiting).
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NOT_MAPPED: CUresult = 211;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
/// The handle is not in a state the call needs (e.g. ending a capture never begun).
pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
/// `cuCtxEnablePeerAccess`: the current context may already access the peer's memory.
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
/// `cuCtxDisablePeerAccess`: peer access was never enabled.
pub const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: CUresult = 705;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CUresult = 713;
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
/// The operation is not permitted while the stream (or a stream it would synchronize
/// with) is capturing; the capture is invalidated.
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
/// The capture was invalidated by an earlier error.
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
/// The operation would merge two independent captures.
pub const CUDA_ERROR_STREAM_CAPTURE_MERGE: CUresult = 902;
/// The capture was not begun in this stream.
pub const CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CUresult = 903;
/// A stream forked into the capture has not joined back into the origin stream.
pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: CUresult = 904;
/// A dependency would cross the capture boundary.
pub const CUDA_ERROR_STREAM_CAPTURE_ISOLATION: CUresult = 905;
/// An implicit dependency of the legacy stream on a capturing blocking stream.
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
/// The event was last recorded in a capturing stream.
pub const CUDA_ERROR_CAPTURED_EVENT: CUresult = 907;
/// A non-relaxed capture was ended from another thread than the one that began it.
pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;
/// `cuGraphExecUpdate` could not apply the graph to the executable graph.
pub const CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: CUresult = 910;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;
