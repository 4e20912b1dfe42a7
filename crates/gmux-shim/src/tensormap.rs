//! TMA tensor maps (`CUtensorMap`, 128 opaque bytes) hide the address they describe, and
//! Hopper kernels (cuDNN, CUTLASS, cuBLAS) receive them as parameters instead of raw
//! pointers. gmux records the address of every map the program encodes, keyed by the
//! map's bytes, so that prediction can see through a map found in a parameter block.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Bytes of a `CUtensorMap`.
pub const MAP_BYTES: usize = 128;
/// Alignment of a `CUtensorMap` in a parameter block.
pub const MAP_ALIGN: usize = 64;

static MAPS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static ANY: AtomicBool = AtomicBool::new(false);

fn key(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Records that the map at `map` (just encoded by the driver) describes `addr`.
///
/// # Safety
/// `map` points to 128 readable bytes.
pub unsafe fn record(map: *const u8, addr: u64) {
    // SAFETY: per this function's contract, `map` points to `MAP_BYTES` (128) readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(map, MAP_BYTES) };
    MAPS.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key(bytes), addr);
    ANY.store(true, Ordering::Release);
}

/// Whether any map was recorded (prediction skips the lookup otherwise).
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// The address described by the map whose bytes are `bytes`, if gmux saw it encoded.
pub fn lookup(bytes: &[u8]) -> Option<u64> {
    MAPS.lock().unwrap_or_else(|p| p.into_inner()).as_ref()?.get(&key(bytes)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_map_is_found_by_its_bytes_only() {
        let mut m = [7u8; MAP_BYTES];
        // SAFETY: `m` is a live array of `MAP_BYTES` bytes.
        unsafe { record(m.as_ptr(), 0x7e00_1234_0000) };
        assert!(any());
        assert_eq!(lookup(&m), Some(0x7e00_1234_0000));
        m[100] = 8;
        assert_eq!(lookup(&m), None);
    }
}
