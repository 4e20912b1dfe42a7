//! The process's device: the one [`Memory`] instance sized by `GMUX_STANDIN_MEM`, the
//! counters `gmuxStandinCounters` reports, and accessors that abort on a refused byte.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{Fault, Memory, DEFAULT_LIMIT, VA_BASE, VA_WINDOW};

/// Indexes into [`COUNTERS`], in the order `gmuxStandinCounters` reports them.
pub mod counter {
    pub const CREATES: usize = 0;
    pub const MAPS: usize = 1;
    pub const UNMAPS: usize = 2;
    pub const SET_ACCESS: usize = 3;
    pub const H2D_BYTES: usize = 4;
    pub const D2H_BYTES: usize = 5;
    pub const RELEASES: usize = 6;
}

/// Call and byte counters; live physical bytes come from [`Memory::live`].
pub static COUNTERS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

/// The most physical memory alive at once (created, not yet freed), in bytes.
pub static PEAK_LIVE: AtomicU64 = AtomicU64::new(0);

/// The same for the memory `cuMemCreate` made on each device.
pub static PEAK_LIVE_ON: [AtomicU64; crate::ctx::MAX_DEVICES] = [const { AtomicU64::new(0) }; crate::ctx::MAX_DEVICES];

/// Adds `n` to counter `which`.
pub fn count(which: usize, n: u64) {
    COUNTERS[which].fetch_add(n, Ordering::Relaxed);
}

/// Parses `GMUX_STANDIN_MEM`: bytes, or a number with suffix K, M, G or T (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_suffix(['b', 'B']).unwrap_or(s);
    let s = s.strip_suffix(['i', 'I']).unwrap_or(s);
    let (num, shift) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 10),
        'm' | 'M' => (&s[..s.len() - 1], 20),
        'g' | 'G' => (&s[..s.len() - 1], 30),
        't' | 'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The process's device memory.
pub static MEM: LazyLock<RwLock<Memory>> = LazyLock::new(|| {
    let limit = match std::env::var("GMUX_STANDIN_MEM") {
        Ok(v) => parse_size(&v).unwrap_or_else(|| {
            eprintln!("cuda-standin: cannot parse GMUX_STANDIN_MEM={v:?}");
            std::process::abort()
        }),
        Err(_) => DEFAULT_LIMIT,
    };
    // Keep host mappings out of the device window, so no host pointer looks like a device one.
    // SAFETY: `MAP_FIXED_NOREPLACE` never replaces an existing mapping (the call fails instead,
    // and the result is ignored), so this only claims unused address space, inaccessible.
    unsafe {
        libc::mmap(
            VA_BASE as *mut libc::c_void,
            VA_WINDOW as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        );
    }
    RwLock::new(Memory::new(limit))
});

/// Shared access to [`MEM`].
pub fn mem() -> RwLockReadGuard<'static, Memory> {
    MEM.read().unwrap_or_else(|e| e.into_inner())
}

/// Exclusive access to [`MEM`].
pub fn mem_mut() -> RwLockWriteGuard<'static, Memory> {
    MEM.write().unwrap_or_else(|e| e.into_inner())
}

/// Reports a refused device access by `what` (a kernel or copy name) and aborts.
pub fn fault(what: &str, f: Fault) -> ! {
    eprintln!("cuda-standin: {what} touched unmapped device address {:#x} ({})", f.addr, f.why);
    std::process::abort()
}

/// Reads device memory or aborts naming `what`.
pub unsafe fn dev_read(what: &str, src: u64, dst: *mut u8, len: usize) {
    if let Err(f) = mem().read(src, dst, len) {
        fault(what, f)
    }
}

/// Writes device memory or aborts naming `what`.
pub unsafe fn dev_write(what: &str, dst: u64, src: *const u8, len: usize) {
    if let Err(f) = mem().write(dst, src, len) {
        fault(what, f)
    }
}
