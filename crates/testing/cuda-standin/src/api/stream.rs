//! Streams, events and host callbacks.

use std::ffi::{c_int, c_uint, c_void};

use cuda_abi::*;

use super::{code, event_handle, event_id, put, resolve_stream, stream_handle, NullStream, SendPtr};
use crate::capture::{self, Route};
use crate::graph::{HostCall, Op};
use crate::{ctx, exec};

/// Greatest (numerically lowest) stream priority; the least is 0.
pub const GREATEST_PRIORITY: c_int = -5;

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) -> CUresult {
    cuStreamCreateWithPriority(ph, flags, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(ph: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult {
    tri!(ctx::require_current());
    if ph.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let id = exec::create_stream(flags, priority.clamp(GREATEST_PRIORITY, 0));
    *ph = stream_handle(id);
    CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(h: CUstream) -> CUresult {
    tri!(ctx::require_current());
    if h as usize <= 2 {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let id = tri!(resolve_stream(h, NullStream::Legacy));
    code(exec::destroy_stream(id))
}

unsafe fn stream_sync(h: CUstream, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let s = tri!(resolve_stream(h, null));
    tri!(capture::before_sync(s));
    code(exec::sync_stream(s))
}

unsafe fn stream_query(h: CUstream, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let s = tri!(resolve_stream(h, null));
    tri!(capture::before_sync(s));
    match exec::query_stream(s) {
        Ok(true) => CUDA_SUCCESS,
        Ok(false) => CUDA_ERROR_NOT_READY,
        Err(e) => e,
    }
}

unsafe fn stream_wait_event(h: CUstream, e: CUevent, flags: c_uint, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    if flags & !1 != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (s, ev) = (tri!(resolve_stream(h, null)), tri!(event_id(e)));
    if tri!(capture::wait_event(s, ev, flags & CU_EVENT_WAIT_EXTERNAL != 0)) {
        return CUDA_SUCCESS;
    }
    code(exec::wait_event(s, ev))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(h: CUstream) -> CUresult {
    stream_sync(h, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(h: CUstream) -> CUresult {
    stream_sync(h, NullStream::PerThread)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(h: CUstream) -> CUresult {
    stream_query(h, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery_ptsz(h: CUstream) -> CUresult {
    stream_query(h, NullStream::PerThread)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(h: CUstream, e: CUevent, flags: c_uint) -> CUresult {
    stream_wait_event(h, e, flags, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent_ptsz(h: CUstream, e: CUevent, flags: c_uint) -> CUresult {
    stream_wait_event(h, e, flags, NullStream::PerThread)
}

unsafe fn stream_info(h: CUstream, null: NullStream) -> Result<(exec::Kind, u32, i32), CUresult> {
    ctx::require_current()?;
    exec::stream_info(resolve_stream(h, null)?).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(h: CUstream, priority: *mut c_int) -> CUresult {
    code(stream_info(h, NullStream::Legacy).and_then(|(_, _, p)| put(priority, p)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(h: CUstream, priority: *mut c_int) -> CUresult {
    code(stream_info(h, NullStream::PerThread).and_then(|(_, _, p)| put(priority, p)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(h: CUstream, flags: *mut c_uint) -> CUresult {
    code(stream_info(h, NullStream::Legacy).and_then(|(_, f, _)| put(flags, f)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(h: CUstream, flags: *mut c_uint) -> CUresult {
    code(stream_info(h, NullStream::PerThread).and_then(|(_, f, _)| put(flags, f)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(h: CUstream, pctx: *mut CUcontext) -> CUresult {
    code(stream_info(h, NullStream::Legacy).and_then(|_| put(pctx, ctx::ambient())))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_ptsz(h: CUstream, pctx: *mut CUcontext) -> CUresult {
    code(stream_info(h, NullStream::PerThread).and_then(|_| put(pctx, ctx::ambient())))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CUresult {
    tri!(ctx::require_current());
    if flags & !0xf != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    code(put(ph, event_handle(exec::create_event(flags))))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(e: CUevent) -> CUresult {
    tri!(ctx::require_current());
    let ev = tri!(event_id(e));
    capture::forget_event(ev);
    code(exec::destroy_event(ev))
}

/// During capture, a plain record makes the event stand for the stream's captured work;
/// an external one (`CU_EVENT_RECORD_EXTERNAL`) adds an event record node.
unsafe fn event_record(e: CUevent, h: CUstream, flags: c_uint, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let ev = tri!(event_id(e));
    let s = tri!(resolve_stream(h, null));
    match tri!(capture::route(s)) {
        Route::Capture if flags & CU_EVENT_RECORD_EXTERNAL != 0 => code(capture::add(s, Op::EventRecord(ev)).map(drop)),
        Route::Capture => code(capture::record_event(ev, s)),
        Route::Run => {
            capture::forget_event(ev);
            code(exec::record(ev, s))
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(e: CUevent, h: CUstream) -> CUresult {
    event_record(e, h, 0, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord_ptsz(e: CUevent, h: CUstream) -> CUresult {
    event_record(e, h, 0, NullStream::PerThread)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(e: CUevent, h: CUstream, flags: c_uint) -> CUresult {
    event_record(e, h, flags, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(e: CUevent, h: CUstream, flags: c_uint) -> CUresult {
    event_record(e, h, flags, NullStream::PerThread)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(e: CUevent) -> CUresult {
    tri!(ctx::require_current());
    let ev = tri!(event_id(e));
    tri!(capture::before_event_sync(ev));
    match exec::query_event(ev) {
        Ok(true) => CUDA_SUCCESS,
        Ok(false) => CUDA_ERROR_NOT_READY,
        Err(err) => err,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: CUevent) -> CUresult {
    tri!(ctx::require_current());
    let ev = tri!(event_id(e));
    tri!(capture::before_event_sync(ev));
    code(exec::sync_event(ev))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    tri!(ctx::require_current());
    let v = tri!(exec::elapsed_ms(tri!(event_id(start)), tri!(event_id(end))));
    code(put(ms, v))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    cuEventElapsedTime(ms, start, end)
}

unsafe fn launch_host_func(h: CUstream, f: CUhostFn, data: *mut c_void, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let Some(f) = f else { return CUDA_ERROR_INVALID_VALUE };
    let s = tri!(resolve_stream(h, null));
    if tri!(capture::route(s)) == Route::Capture {
        return code(capture::add(s, Op::Host(HostCall { f, data: data as usize })).map(drop));
    }
    let data = SendPtr(data);
    code(exec::submit(s, Vec::new(), Box::new(move || f(data.get()))).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(h: CUstream, f: CUhostFn, data: *mut c_void) -> CUresult {
    launch_host_func(h, f, data, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc_ptsz(h: CUstream, f: CUhostFn, data: *mut c_void) -> CUresult {
    launch_host_func(h, f, data, NullStream::PerThread)
}

unsafe fn add_callback(h: CUstream, cb: CUstreamCallback, data: *mut c_void, flags: c_uint, null: NullStream) -> CUresult {
    tri!(ctx::require_current());
    let Some(cb) = cb else { return CUDA_ERROR_INVALID_VALUE };
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let s = tri!(resolve_stream(h, null));
    if tri!(capture::route(s)) == Route::Capture {
        return capture::unsupported(s);
    }
    let (data, handle) = (SendPtr(data), SendPtr(h));
    code(exec::submit(s, Vec::new(), Box::new(move || cb(handle.get(), CUDA_SUCCESS, data.get()))).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback(h: CUstream, cb: CUstreamCallback, data: *mut c_void, flags: c_uint) -> CUresult {
    add_callback(h, cb, data, flags, NullStream::Legacy)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback_ptsz(h: CUstream, cb: CUstreamCallback, data: *mut c_void, flags: c_uint) -> CUresult {
    add_callback(h, cb, data, flags, NullStream::PerThread)
}
