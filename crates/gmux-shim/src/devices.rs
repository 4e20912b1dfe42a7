//! The devices a process uses, each with gmux state of its own ([`Shim`]): its memory,
//! limit, mover and link to its GPU's daemon. A call finds its device by the calling
//! thread's current context (allocations, launches) or by the address it names (frees,
//! attributes); addresses of every device live in one process-wide map of owners, so
//! that a command of one device that reaches another's memory is found
//! ([`take_reached`], `api::across`).
//!
//! Lock order: a thread holds one device's state at a time, or several taken in
//! ascending ordinal order.

use crate::cuda::*;
use crate::state::Shim;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

/// Most devices of a process (ordinals 0 to 31 of those it sees).
pub const MAX_DEVICES: usize = gmux_cuda::device::MAX_PEERS;

/// Each device's state, boxed so that the empty slots take no space in the library.
static SLOTS: [Mutex<Option<Box<Shim>>>; MAX_DEVICES] = [const { Mutex::new(None) }; MAX_DEVICES];

/// Devices with state, one bit per ordinal.
static IN_USE: AtomicU32 = AtomicU32::new(0);

/// Held while a device gets its state and joins the others.
static JOINING: Mutex<()> = Mutex::new(());

/// Devices whose daemon would not serve them ([`unserved`]), one bit per ordinal.
static UNSERVED: AtomicU32 = AtomicU32::new(0);

/// The gmux state of one device, locked.
pub type Guard = MutexGuard<'static, Option<Box<Shim>>>;

/// The device of the calling thread's current context.
pub fn current() -> Result<usize, CUresult> {
    let mut dev = 0;
    match crate::real!(cuCtxGetDevice(&mut dev)) {
        CUDA_SUCCESS => usize::try_from(dev).ok().filter(|d| *d < MAX_DEVICES).ok_or(CUDA_ERROR_INVALID_DEVICE),
        r => Err(r),
    }
}

fn lock(dev: usize) -> Guard {
    SLOTS[dev].lock().unwrap_or_else(|p| p.into_inner())
}

/// The state of the current context's device, created on first use.
pub fn shim() -> Result<Guard, CUresult> {
    shim_of(current()?)
}

/// [`shim`] where the caller knows the current context's device, `dev`.
pub fn shim_of(dev: usize) -> Result<Guard, CUresult> {
    if IN_USE.load(Ordering::Acquire) & (1 << dev) == 0 {
        return create(dev);
    }
    Ok(lock(dev))
}

/// Device `dev`'s state, made now unless another thread made it first, then joined to
/// the process's other devices ([`join`], with no state locked).
#[cold]
#[inline(never)]
fn create(dev: usize) -> Result<Guard, CUresult> {
    if UNSERVED.load(Ordering::Acquire) & (1 << dev) != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    // One device joins at a time, so that each sees every device before it.
    let _one = JOINING.lock().unwrap_or_else(|p| p.into_inner());
    if IN_USE.load(Ordering::Acquire) & (1 << dev) != 0 {
        return Ok(lock(dev));
    }
    {
        let mut g = lock(dev);
        if g.is_none() {
            *g = Some(Box::new(Shim::new(dev)?));
        }
    }
    join(dev);
    IN_USE.fetch_or(1 << dev, Ordering::AcqRel);
    Ok(lock(dev))
}

/// The state of the current context's device if it exists (the lowest device's when no
/// context is current).
pub fn existing() -> Guard {
    match current() {
        Ok(dev) => lock(dev),
        Err(_) => lock(in_use().next().unwrap_or(0)),
    }
}

/// The state of device `dev` if it exists.
pub fn on(dev: usize) -> Guard {
    lock(dev.min(MAX_DEVICES - 1))
}

/// The state of the device whose gmux memory holds `ptr`, else the current context's.
pub fn of(ptr: CUdeviceptr) -> Guard {
    match owner(ptr) {
        Some(dev) => lock(dev),
        None => existing(),
    }
}

/// The state of device `dev` without blocking for long (for the exit summary): another
/// thread may hold it briefly (the daemon agent), or forever (a thread killed inside a
/// call).
pub fn try_on(dev: usize) -> Option<Guard> {
    for _ in 0..200 {
        if let Ok(g) = SLOTS[dev].try_lock() {
            return Some(g);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}

/// The devices with state, in ascending order.
pub fn in_use() -> impl Iterator<Item = usize> {
    let mask = IN_USE.load(Ordering::Acquire);
    (0..MAX_DEVICES).filter(move |d| mask & (1 << d) != 0)
}

/// Makes the context of `st`'s device current on the calling thread until dropped, for
/// gmux's own work on a device that may not be the current one (a free, a synchronize).
/// With one device in the process there is nothing to switch: no driver call.
pub fn enter(st: &Shim) -> Option<gmux_cuda::context::Scope> {
    several().then(|| gmux_cuda::context::Scope::enter(st.ctx()))
}

/// Whether the process uses more than one device (one load).
pub fn several() -> bool {
    IN_USE.load(Ordering::Relaxed).count_ones() > 1
}

/// Once device `dev` has its state, before it has memory: where the process already uses
/// other devices, the devices become peers (every mapping grants all of them access),
/// and the mappings made so far are granted to the newcomer. No state lock is held here.
fn join(dev: usize) {
    let others: Vec<usize> = in_use().filter(|d| *d != dev).collect();
    if others.is_empty() {
        return;
    }
    let apart: Vec<usize> = others.iter().copied().filter(|&o| !can_reach(dev, o) || !can_reach(o, dev)).collect();
    if !apart.is_empty() {
        crate::api::refuse::once(
            &format!("apart {dev}"),
            &format!("devices {dev} and {apart:?} cannot access each other's memory (no peer-to-peer link): a copy or kernel of one over gmux memory of the other is refused by name"),
            crate::log::Level::Warn,
        );
        return;
    }
    gmux_cuda::device::add_peer(dev as i32);
    for &o in &others {
        gmux_cuda::device::add_peer(o as i32);
    }
    for o in others {
        if let Some(st) = lock(o).as_mut() {
            if let Err(e) = st.memory.dev.grant_peers() {
                crate::log!(Error, "granting device {dev} access to device {o}'s memory failed ({e}); copies between them fail");
            }
        }
    }
    crate::log!(Info, "device {dev} joins this process's devices: their gmux memory is mapped for all of them (peer access)");
}

/// A device after the first whose daemon could not register it (`why`): gmux leaves its
/// memory to the driver, unvirtualized, and refuses its allocations by name from now on.
pub fn unserved(dev: usize, why: &str) -> CUresult {
    UNSERVED.fetch_or(1 << dev, Ordering::AcqRel);
    crate::log!(
        Error,
        "device {dev}: {why}; its memory is not virtualized, and its allocations return CUDA_ERROR_NOT_SUPPORTED: under `gmux run` without GMUX_SOCKET each GPU's daemon serves its own, or make one GPU visible (`gmux run --gpus N`)"
    );
    CUDA_ERROR_NOT_SUPPORTED
}

/// Whether device `from` can access device `to`'s memory.
pub fn can_reach(from: usize, to: usize) -> bool {
    let mut can = 0;
    crate::real!(cuDeviceCanAccessPeer(&mut can, from as CUdevice, to as CUdevice)) == CUDA_SUCCESS && can == 1
}

/// The device whose state serves context `ctx`.
pub fn of_ctx(ctx: CUcontext) -> Option<usize> {
    in_use().find(|d| lock(*d).as_ref().is_some_and(|st| st.ctx() == ctx))
}

/// Whether every mapping grants device `dev` access (it is a peer of the others).
pub fn is_peer(dev: usize) -> bool {
    gmux_cuda::device::peers() & (1 << dev) != 0
}

/// Address ranges of every device's gmux memory: base to (end, device).
static OWNERS: RwLock<BTreeMap<CUdeviceptr, (CUdeviceptr, usize)>> = RwLock::new(BTreeMap::new());

/// Bounds of every address [`OWNERS`] has held: a word outside them is no gmux address,
/// without a lookup.
static LOWEST: AtomicU64 = AtomicU64::new(u64::MAX);
static HIGHEST: AtomicU64 = AtomicU64::new(0);

/// Notes that device `dev`'s gmux memory holds `[base, base + len)`.
pub fn own(base: CUdeviceptr, len: u64, dev: usize) {
    let end = base.saturating_add(len);
    OWNERS.write().unwrap_or_else(|p| p.into_inner()).insert(base, (end, dev));
    LOWEST.fetch_min(base, Ordering::Relaxed);
    HIGHEST.fetch_max(end, Ordering::Relaxed);
}

/// Forgets the range at `base`.
pub fn disown(base: CUdeviceptr) {
    OWNERS.write().unwrap_or_else(|p| p.into_inner()).remove(&base);
}

/// The device whose gmux memory holds `ptr`.
pub fn owner(ptr: CUdeviceptr) -> Option<usize> {
    let g = OWNERS.read().unwrap_or_else(|p| p.into_inner());
    let (_, &(end, dev)) = g.range(..=ptr).next_back()?;
    (ptr < end).then_some(dev)
}

/// The devices whose gmux memory `[start, start + len)` crosses.
fn owners_over(start: CUdeviceptr, len: u64) -> impl Iterator<Item = usize> {
    let g = OWNERS.read().unwrap_or_else(|p| p.into_inner());
    let end = start.saturating_add(len.max(1));
    let first = g.range(..=start).next_back().filter(|(_, (e, _))| *e > start).map_or(start, |(b, _)| *b);
    let devs: Vec<usize> = g.range(first..end).map(|(_, (_, d))| *d).collect();
    devs.into_iter()
}

/// Memory of another device that a command reaches: its device and byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// The device whose gmux memory it is.
    pub dev: usize,
    /// First byte.
    pub start: CUdeviceptr,
    /// Bytes (1 for a pointer).
    pub len: u64,
}

thread_local! {
    /// Memory of other devices that the working set being computed reaches
    /// ([`note_reach`], [`take_reached`]).
    static REACHED: RefCell<Vec<Reach>> = const { RefCell::new(Vec::new()) };
}

/// The addresses that may be some device's gmux memory, in a process of several devices
/// (empty in a process of one): an address outside it and outside the own device's
/// regions is no gmux memory.
pub fn reach_span() -> std::ops::Range<CUdeviceptr> {
    if !several() {
        return 0..0;
    }
    LOWEST.load(Ordering::Relaxed)..HIGHEST.load(Ordering::Relaxed)
}

/// Notes, for a command of device `own`, that it reaches `[start, start + len)`, when
/// that is another device's gmux memory (a no-op in a process of one device).
pub fn note_reach(own: usize, start: CUdeviceptr, len: u64) {
    if !several() || start >= HIGHEST.load(Ordering::Relaxed) || start.saturating_add(len) <= LOWEST.load(Ordering::Relaxed) {
        return;
    }
    for dev in owners_over(start, len).filter(|d| *d != own) {
        REACHED.with(|r| r.borrow_mut().push(Reach { dev, start, len }));
    }
}

/// Takes what [`note_reach`] noted since the last call.
pub fn take_reached() -> Vec<Reach> {
    if !several() {
        return Vec::new();
    }
    REACHED.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_belongs_to_the_device_whose_range_holds_it() {
        own(0x7000_0000_0000, 4 << 20, 1);
        own(0x7000_0040_0000, 2 << 20, 0);
        assert_eq!(owner(0x7000_0000_0000), Some(1));
        assert_eq!(owner(0x7000_0000_0000 + (4 << 20) - 1), Some(1));
        assert_eq!(owner(0x7000_0040_0000 + 5), Some(0));
        assert_eq!(owner(0x7000_0060_0000), None);
        assert_eq!(owner(0x6fff_ffff_ffff), None);
        let over: Vec<usize> = owners_over(0x7000_0030_0000, 2 << 20).collect();
        assert_eq!(over, vec![1, 0], "a range crossing two devices' memory names both");
        disown(0x7000_0000_0000);
        assert_eq!(owner(0x7000_0000_0010), None);
        disown(0x7000_0040_0000);
    }
}
