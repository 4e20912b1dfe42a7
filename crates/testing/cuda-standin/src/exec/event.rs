//! Events: created, recorded into a stream's op order, queried, waited on by host and by
//! other streams, and timed.

use std::time::Instant;

use cuda_abi::*;

use super::{enqueue, lock, wait, Event, StreamId};

/// Creates an event.
pub fn create_event(flags: u32) -> u64 {
    let mut g = lock();
    let id = g.next_event;
    g.next_event += 1;
    g.events.insert(id, Event { flags, recorded: None, done_at: None });
    id
}

/// Destroys an event; a pending record still completes.
pub fn destroy_event(id: u64) -> Result<(), CUresult> {
    lock().events.remove(&id).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuEventRecord`: the event now stands for all work enqueued on `stream` so far.
pub fn record(event: u64, stream: StreamId) -> Result<(), CUresult> {
    let mut g = lock();
    if !g.events.contains_key(&event) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let seq = enqueue(&mut g, stream, Vec::new(), Box::new(|| {}))?;
    g.markers.insert(seq, event);
    let e = g.events.get_mut(&event).unwrap();
    e.recorded = Some(seq);
    e.done_at = None;
    Ok(())
}

/// The op an event's latest record captured, if any.
fn captured(event: u64) -> Result<Option<u64>, CUresult> {
    Ok(lock().events.get(&event).ok_or(CUDA_ERROR_INVALID_HANDLE)?.recorded)
}

/// `cuEventQuery`: an event never recorded counts as complete.
pub fn query_event(event: u64) -> Result<bool, CUresult> {
    let seq = captured(event)?;
    Ok(seq.is_none_or(|s| lock().done(s)))
}

/// `cuEventSynchronize`.
pub fn sync_event(event: u64) -> Result<(), CUresult> {
    if let Some(seq) = captured(event)? {
        wait(seq);
    }
    Ok(())
}

/// `cuStreamWaitEvent`: later ops on `stream` wait for the event's current capture.
pub fn wait_event(stream: StreamId, event: u64) -> Result<(), CUresult> {
    let mut g = lock();
    match g.events.get(&event).ok_or(CUDA_ERROR_INVALID_HANDLE)?.recorded {
        Some(seq) => enqueue(&mut g, stream, vec![seq], Box::new(|| {})).map(|_| ()),
        None => g.live_stream(stream).map(|_| ()).ok_or(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// `cuEventElapsedTime`: host milliseconds between the completions of two records.
pub fn elapsed_ms(start: u64, end: u64) -> Result<f32, CUresult> {
    let g = lock();
    let (a, b) = match (g.events.get(&start), g.events.get(&end)) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(CUDA_ERROR_INVALID_HANDLE),
    };
    if a.flags & CU_EVENT_DISABLE_TIMING != 0 || b.flags & CU_EVENT_DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    if a.recorded.is_none() || b.recorded.is_none() {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    match (a.done_at, b.done_at) {
        (Some(ta), Some(tb)) => {
            let ms = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64() * 1e3;
            Ok((ms(ta, tb) - ms(tb, ta)) as f32)
        }
        _ => Err(CUDA_ERROR_NOT_READY),
    }
}
