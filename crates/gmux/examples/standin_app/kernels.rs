//! The kernels: host functions registered with the stand-in, which reach device memory
//! through `gmuxStandinRead` / `gmuxStandinWrite` in blocks of [`BLOCK_WORDS`], and the
//! `App` methods that register them and launch them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;

/// Kernels completed so far (for host-callback ordering checks).
pub static KERNELS_DONE: AtomicU64 = AtomicU64::new(0);
const BLOCK_WORDS: u64 = 16 * 1024;

/// The word `fill` with `seed` writes at index `i`.
pub fn hash(seed: u32, i: u64) -> u32 {
    let mut x = ((seed as u64) << 32 ^ i).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// Parameter `i` of a kernel, read from where the stand-in's argument array points.
///
/// # Safety
/// `args` holds at least `i + 1` pointers, the `i`th to a value of `T` (the stand-in calls
/// a kernel with a pointer to each parameter, of the size it was registered with).
unsafe fn arg<T: Copy>(args: *const *mut c_void, i: usize) -> T {
    // SAFETY: per this function's contract; the read is unaligned, as the stand-in packs
    // parameters at the offsets their sizes give.
    unsafe { (*args.add(i) as *const T).read_unaligned() }
}

fn dev_read(p: u64, out: &mut [u32]) {
    let s = STANDIN.get().unwrap();
    // SAFETY: the stand-in writes `out.len() * 4` bytes into `out`, which holds that many; it
    // checks the device range itself.
    unsafe { (s.read)(p, out.as_mut_ptr() as *mut u8, out.len() * 4) }
}

fn dev_write(p: u64, data: &[u32]) {
    let s = STANDIN.get().unwrap();
    // SAFETY: the stand-in reads `data.len() * 4` bytes from `data`, which holds that many; it
    // checks the device range itself.
    unsafe { (s.write)(p, data.as_ptr() as *const u8, data.len() * 4) }
}

/// Calls `f(first_index, block)` for each block of `n` words at `p`, writing back if asked.
fn blocks(p: u64, n: u64, read: bool, mut f: impl FnMut(u64, &mut [u32])) {
    let mut buf = vec![0u32; BLOCK_WORDS.min(n) as usize];
    let mut i = 0;
    while i < n {
        let b = &mut buf[..(n - i).min(BLOCK_WORDS) as usize];
        if read {
            dev_read(p + i * 4, b);
        }
        f(i, b);
        dev_write(p + i * 4, b);
        i += b.len() as u64;
    }
}

/// `fill(u32* p, u64 n, u32 seed)`: p[i] = hash(seed, i).
unsafe extern "C" fn k_fill(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (p, n, seed) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    blocks(p, n, false, |start, b| b.iter_mut().enumerate().for_each(|(j, w)| *w = hash(seed, start + j as u64)));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `add(u32* p, u64 n, u32 v)`: p[i] += v.
unsafe extern "C" fn k_add(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (p, n, v) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    blocks(p, n, true, |_, b| b.iter_mut().for_each(|w| *w = w.wrapping_add(v)));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `gather(u32** table, u64 count, u32 v)`: adds v to the first 1024 words of each of the
/// `count` buffers whose addresses `table` holds: pointers the kernel finds in memory, not
/// in its parameters.
unsafe extern "C" fn k_gather(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (table, count, v) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    let mut ptrs = vec![0u64; count as usize];
    // SAFETY: the `count` `u64`s of `ptrs` are `2 * count` `u32`s of the same bytes, and a
    // `u64`'s alignment suffices for a `u32`.
    dev_read(table, unsafe { std::slice::from_raw_parts_mut(ptrs.as_mut_ptr() as *mut u32, count as usize * 2) });
    for p in ptrs {
        blocks(p, 1024, true, |_, b| b.iter_mut().for_each(|w| *w = w.wrapping_add(v)));
    }
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `ncclDevKernel_GatherHost(u64* table, u64 count, u32 v)`: as `gather`, with the table
/// in host memory, where no copy to the device shows gmux the pointers: as NCCL's
/// collectives find their buffers in work items the host writes. Named like NCCL's.
unsafe extern "C" fn k_gather_host(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 4), which these types have.
    let (table, count, v) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u32>(args, 2)) };
    // SAFETY: the launcher passes a host array of `count` addresses that outlives the kernel.
    let ptrs = unsafe { std::slice::from_raw_parts(table as *const u64, count as usize) };
    for &p in ptrs {
        blocks(p, 1024, true, |_, b| b.iter_mut().for_each(|w| *w = w.wrapping_add(v)));
    }
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `copy(u32* dst, u32* src, u64 n)`.
unsafe extern "C" fn k_copy(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 8, 8), which these types have.
    let (dst, src, n) = unsafe { (arg::<u64>(args, 0), arg::<u64>(args, 1), arg::<u64>(args, 2)) };
    blocks(dst, n, false, |start, b| dev_read(src + start * 4, b));
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// The struct parameter of `mix`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MixArgs {
    a_ptr: u64,
    b_ptr: u64,
    n: u64,
}

/// `mix(MixArgs s, u32 salt)`: a[i] ^= b[i] + salt.
unsafe extern "C" fn k_mix(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (`size_of::<MixArgs>()`, 4), which these types have.
    let (s, salt) = unsafe { (arg::<MixArgs>(args, 0), arg::<u32>(args, 1)) };
    let mut other = vec![0u32; BLOCK_WORDS.min(s.n) as usize];
    blocks(s.a_ptr, s.n, true, |start, b| {
        let o = &mut other[..b.len()];
        dev_read(s.b_ptr + start * 4, o);
        b.iter_mut().zip(o.iter()).for_each(|(w, x)| *w ^= x.wrapping_add(salt));
    });
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

/// `slow(u32* p, u32 ms)`: sleeps, then p[0] = 1.
unsafe extern "C" fn k_slow(args: *const *mut c_void) {
    // SAFETY: the stand-in calls a kernel with a pointer to each of its parameters, of the
    // sizes registered in `App::kernels` (8, 4), which these types have.
    let (p, ms) = unsafe { (arg::<u64>(args, 0), arg::<u32>(args, 1)) };
    std::thread::sleep(Duration::from_millis(ms as u64));
    dev_write(p, &[1]);
    KERNELS_DONE.fetch_add(1, Ordering::SeqCst);
}

pub struct Kernels {
    pub fill: CUfunction,
    pub add: CUfunction,
    pub copy: CUfunction,
    pub slow: CUfunction,
    pub gather: CUfunction,
    pub gather_host: CUfunction,
    /// A `CUkernel`, launched cast to `CUfunction` as the runtime does.
    pub mix: CUkernel,
}

impl App {
    /// Registers the kernels with the stand-in and looks them up as a program would.
    pub fn kernels(cu: &Cuda) -> Kernels {
        let s = STANDIN.get().unwrap();
        let table: [(&str, StandinKernel, &[usize], i32); 7] = [
            ("fill", k_fill, &[8, 8, 4], 0),
            ("add", k_add, &[8, 8, 4], 0),
            ("copy", k_copy, &[8, 8, 8], 0),
            ("slow", k_slow, &[8, 4], 0),
            ("gather", k_gather, &[8, 8, 4], 0),
            ("ncclDevKernel_GatherHost", k_gather_host, &[8, 8, 4], 0),
            ("mix", k_mix, &[std::mem::size_of::<MixArgs>(), 4], 1),
        ];
        for (name, f, sizes, as_kernel) in table {
            // SAFETY: a NUL-terminated name and `sizes.len()` sizes, both live through the
            // call, and a kernel that reads its parameters at those sizes.
            if unsafe { (s.register)(cstr(name).as_ptr(), f, sizes.len() as u32, sizes.as_ptr(), as_kernel) }.is_null() {
                fail(format!("gmuxStandinRegisterKernel({name}) failed"));
            }
        }
        let func = |name: &str| {
            let mut f = null_mut();
            // SAFETY: a NUL-terminated name that lives through the call; the driver writes
            // the function to `f`, a live local.
            check(unsafe { (cu.module_get_function)(&mut f, null_mut(), cstr(name).as_ptr()) }, "cuModuleGetFunction");
            f
        };
        let mut mix = null_mut();
        // SAFETY: a NUL-terminated name; the driver writes the kernel to `mix`, a live local.
        check(unsafe { (cu.library_get_kernel)(&mut mix, null_mut(), c"mix".as_ptr()) }, "cuLibraryGetKernel");
        Kernels {
            fill: func("fill"),
            add: func("add"),
            copy: func("copy"),
            slow: func("slow"),
            gather: func("gather"),
            gather_host: func("ncclDevKernel_GatherHost"),
            mix,
        }
    }

    /// Launches `fill` on `s`.
    pub fn fill(&self, s: CUstream, mut p: u64, mut n: u64, mut seed: u32) {
        self.launch(self.k.fill, s, &mut [ptr(&mut p), ptr(&mut n), ptr(&mut seed)]);
    }

    /// Launches `add` on `s`.
    pub fn add(&self, s: CUstream, mut p: u64, mut n: u64, mut v: u32) {
        self.launch(self.k.add, s, &mut [ptr(&mut p), ptr(&mut n), ptr(&mut v)]);
    }

    /// Launches `copy` on `s`.
    pub fn copy(&self, s: CUstream, mut dst: u64, mut src: u64, mut n: u64) {
        self.launch(self.k.copy, s, &mut [ptr(&mut dst), ptr(&mut src), ptr(&mut n)]);
    }

    /// Launches `mix` on `s`.
    pub fn mix(&self, s: CUstream, a_ptr: u64, b_ptr: u64, n: u64, mut salt: u32) {
        let mut m = MixArgs { a_ptr, b_ptr, n };
        self.launch(self.k.mix as CUfunction, s, &mut [ptr(&mut m), ptr(&mut salt)]);
    }

    /// Launches `slow` on `s`.
    pub fn slow(&self, s: CUstream, mut p: u64, mut ms: u32) {
        self.launch(self.k.slow, s, &mut [ptr(&mut p), ptr(&mut ms)]);
    }
}
