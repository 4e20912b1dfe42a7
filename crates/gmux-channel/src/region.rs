//! The shared memory of one channel: a sealed memfd holding two rings, mapped by the
//! daemon and by one application process; and the two ways to wake a reader (a futex
//! word in the region, an eventfd).
//!
//! Every field of the region is an atomic: the other process may write any of them at
//! any time, and nothing here reads them any other way.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::time::Duration;

/// Slots of each ring.
pub const SLOTS: u32 = 256;

/// Words of one slot (one cache line).
pub const WORDS: usize = 8;

/// What the region's first word holds once the daemon made it.
const MAGIC: u64 = u64::from_le_bytes(*b"gmuxchn2");

/// A value alone on its cache line, so that the two ends' indices never share one.
#[repr(C, align(64))]
pub(crate) struct Line<T>(pub T);

/// One direction: a single-producer single-consumer ring of [`SLOTS`] slots.
#[repr(C)]
pub(crate) struct Ring {
    /// Slots written so far (wrapping), stored by the producer after the slot.
    pub tail: Line<AtomicU32>,
    /// Slots read so far (wrapping), stored by the consumer after reading the slot.
    pub head: Line<AtomicU32>,
    /// 1 while the consumer sleeps or is about to: the producer clears it and wakes it.
    pub sleeping: Line<AtomicU32>,
    pub slots: [[AtomicU64; WORDS]; SLOTS as usize],
}

/// The region's layout.
#[repr(C)]
pub(crate) struct Layout {
    pub magic: Line<AtomicU64>,
    /// Daemon → application: the most commands the application should keep in flight per
    /// stream (0: no bound from the daemon; `HOLD`: release none, and wait on this word).
    pub inflight: Line<AtomicU32>,
    /// Application → daemon.
    pub up: Ring,
    /// Daemon → application.
    pub down: Ring,
}

/// Bytes of the region: the layout, rounded up to whole pages.
pub(crate) fn region_len() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(4096);
    std::mem::size_of::<Layout>().div_ceil(page) * page
}

/// One mapping of a channel's region.
pub(crate) struct Region {
    ptr: NonNull<Layout>,
    len: usize,
}

// SAFETY: the mapping is only reached through `&Layout`, whose fields are all atomics.
unsafe impl Send for Region {}
// SAFETY: as for Send: concurrent access goes through atomics only.
unsafe impl Sync for Region {}

/// `r`, or the OS error a negative `r` reports (a libc call's result).
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Region {
    /// Makes a new region in a memfd sealed against shrinking and growing (so that
    /// neither end can make the other's reads fault), and maps it. Returns it with the
    /// memfd, to hand to the application.
    pub fn create() -> io::Result<(Region, OwnedFd)> {
        let len = region_len();
        // SAFETY: the name is a NUL-terminated literal.
        let fd = check(unsafe { libc::memfd_create(c"gmux-channel".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is open; the length is a small positive size.
        check(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: `fd` is an open memfd that allows sealing.
        check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) })?;
        let region = Region::map(&fd, len)?;
        region.layout().magic.0.store(MAGIC, std::sync::atomic::Ordering::Release);
        Ok((region, fd))
    }

    /// Maps the region the daemon handed over as `fd`, after checking its size and that
    /// the daemon made it.
    pub fn open(fd: &OwnedFd) -> io::Result<Region> {
        let len = region_len();
        // SAFETY: an all-zero stat is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is writable.
        check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if usize::try_from(st.st_size).unwrap_or(0) < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the channel's memory is {} bytes, not {len}: the daemon is of another build", st.st_size),
            ));
        }
        let region = Region::map(fd, len)?;
        if region.layout().magic.0.load(std::sync::atomic::Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the channel's memory is not a gmux channel: the daemon is of another build"));
        }
        Ok(region)
    }

    fn map(fd: &OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: a new shared mapping of `len` bytes of an open file at least that long;
        // the kernel picks the address.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<Layout>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Region { ptr, len })
    }

    /// The layout, valid while the mapping lives.
    pub fn layout(&self) -> &Layout {
        // SAFETY: the mapping is `len >= size_of::<Layout>()` bytes, page-aligned, sealed
        // against shrinking, and unmapped only by Drop; every bit pattern is valid for
        // the atomics it holds.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A new non-blocking eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no pointer arguments.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to eventfd `fd`'s counter (a full counter already wakes its reader).
pub fn ring_eventfd(fd: RawFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to a descriptor the caller owns.
    let _ = unsafe { libc::write(fd, one.as_ptr().cast(), one.len()) };
}

/// Sleeps while `word` holds `expected`, at most `timeout`. Shared (not private): the
/// word is in memory two processes map.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a live, aligned u32; `ts` outlives the call.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec) };
}

/// Wakes every sleeper on `word`.
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE reads nothing else.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// Wakes one sleeper on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE reads nothing else.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1) };
}
