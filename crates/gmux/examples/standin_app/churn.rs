//! Stream-ordered allocation, as PyTorch's `backend:cudaMallocAsync` does it: one
//! allocation per tensor, freed with `cuMemFreeAsync` while kernels may still use it.
//!
//! `free-async --bytes B --ms M`: a buffer of B bytes is given to a `slow` kernel (it
//! sleeps M ms, then writes word 0), freed with `cuMemFreeAsync` at once, and a second
//! buffer of B bytes is allocated on another stream and set to a pattern while the kernel
//! still runs. The pattern must survive the kernel's write. After both streams finish, the
//! second buffer is freed and a third allocated. Prints `free-async: pattern intact,
//! during the kernel: R1, after: R2`, R being `reused` (an address freed before) or `new`.
//!
//! `churn --rounds R [--stale]`: persistent buffers of eight sizes from 1 KiB to 8 MiB;
//! every round, for each size, a fresh buffer from `cuMemAllocAsync` is filled with a seed
//! of the round, copied into the persistent buffer and freed with `cuMemFreeAsync`, with
//! no synchronization (with `--stale`, a kernel is then given the address of a buffer an
//! earlier round freed, and reads none of it, as a stale pointer in a parameter block
//! is). At the end every persistent buffer must hold its last round's fill. Prints `churn: 8 buffers checked`.

use super::*;

pub fn free_async(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let ms = o.num("ms", 300) as u32;
    let (s, other) = (app.stream(0), app.stream(0));
    let x = app.alloc_async(bytes, s);
    app.slow(s, x, ms);
    app.free_async(x, s);
    let y = app.alloc_async(bytes, other);
    let words = bytes / 4;
    // SAFETY: only values: an address this program allocated, and a stream.
    check(unsafe { (app.cu.memset_d32_async)(y, 0xab, words, other) }, "cuMemsetD32Async");
    app.sync(other);
    app.sync(s);
    if app.dtoh(y, words).iter().any(|&w| w != 0xab) {
        eprintln!("standin_app: free-async: the second buffer was written by the kernel that used the freed first one");
        return false;
    }
    app.free_async(y, other);
    app.sync(other);
    let z = app.alloc_async(bytes, s);
    let said = |reused: bool| if reused { "reused" } else { "new" };
    println!("free-async: pattern intact, during the kernel: {}, after: {}", said(y == x), said(z == x || z == y));
    app.free(z);
    true
}

pub fn churn(app: &App, o: &Opts) -> bool {
    const SIZES: [usize; 8] = [3 << 20, 5 << 20, 100 << 10, 3 << 20, 1 << 10, 8 << 20, 600 << 10, 2 << 20];
    let rounds = o.num("rounds", 6) as u32;
    let stale = o.get("stale").is_some();
    let s = app.stream(0);
    let keep: Vec<u64> = SIZES.iter().map(|&b| app.alloc(b)).collect();
    let mut freed = [0u64; SIZES.len()];
    let seed = |r: u32, i: usize| r * 16 + i as u32;
    for r in 0..rounds {
        for (i, &bytes) in SIZES.iter().enumerate() {
            let words = (bytes / 4) as u64;
            let t = app.alloc_async(bytes, s);
            app.fill(s, t, words, seed(r, i));
            app.copy(s, keep[i], t, words);
            app.free_async(t, s);
            if stale && r > 0 {
                // A kernel given the address of the buffer of this size that the round
                // before freed, which it reads nothing of.
                let (mut table, mut count, mut v) = (freed[(i + 3) % SIZES.len()], 0u64, 0u32);
                app.launch(app.k.gather, s, &mut [ptr(&mut table), ptr(&mut count), ptr(&mut v)]);
            }
            freed[i] = t;
        }
    }
    app.sync(s);
    for (i, (&p, &bytes)) in keep.iter().zip(&SIZES).enumerate() {
        let want: Vec<u32> = (0..(bytes / 4) as u64).map(|j| hash(seed(rounds - 1, i), j)).collect();
        if mismatch(&format!("churn: buffer {i}"), &app.dtoh(p, bytes / 4), &want) {
            return false;
        }
    }
    println!("churn: {} buffers checked", SIZES.len());
    true
}
