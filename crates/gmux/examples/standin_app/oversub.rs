//! `oversub --total BYTES --buffers N --ops K --seed S [--streams M] [--counters]`: N
//! buffers of mixed sizes summing to about BYTES, then K random operations on them (kernels,
//! device-to-device copies, memsets, uploads and read-backs through pinned or pageable
//! memory, synchronizations, frees and reallocations) over the legacy default stream and M
//! others, ordered by events; every read-back and every buffer at the end is checked
//! against a host model. `--counters` adds a line with the stand-in's VMM call counters
//! after the ops, before the final read-backs and frees.
//!
//! `shared-read --bytes B --rounds R --others N`: weights read from two streams with no
//! event between them, pushed out every round by N other buffers (see [`shared_read`]).
//!
//! `loop --buffers N --bytes B --rounds R [--reverse-every K] [--free]`: a training-like
//! loop over the same buffers every round (see [`loop_rounds`]).

use super::*;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
}

/// A device buffer, its exact expected contents, and the stream index that touched it last.
struct Buf {
    ptr: u64,
    model: Vec<u32>,
    last: Option<usize>,
}

/// Streams (index 0 is the legacy default stream) and the event pool that orders them.
struct Sched<'a> {
    app: &'a App,
    streams: Vec<CUstream>,
    events: Vec<CUevent>,
    next_event: usize,
}

impl Sched<'_> {
    /// Orders the next op on stream `s` after every earlier access to buffers `which`.
    fn order(&mut self, bufs: &mut [Buf], which: &[usize], s: usize) {
        for &i in which {
            if let Some(last) = bufs[i].last.filter(|&l| l != s) {
                let e = self.events[self.next_event % self.events.len()];
                self.next_event += 1;
                self.app.record(e, self.streams[last]);
                self.app.wait_event(self.streams[s], e);
            }
            bufs[i].last = Some(s);
        }
    }

    /// Waits until every access to `b` has completed.
    fn quiesce(&self, b: &Buf) {
        if let Some(l) = b.last {
            self.app.sync(self.streams[l]);
        }
    }
}

/// Buffer sizes (bytes, multiples of 4) summing to about `total`: a mix of small ones,
/// sub-2 MiB ones, exact multiples of 2 MiB and large ones that are not.
fn buffer_sizes(total: u64, n: usize, rng: &mut Rng) -> Vec<usize> {
    const MIB2: u64 = 2 << 20;
    let weights: Vec<f64> = (0..n).map(|i| [0.05, 0.4, 1.0, 2.5][(i + rng.below(2) * 2) % 4]).collect();
    let sum: f64 = weights.iter().sum();
    weights
        .iter()
        .map(|w| {
            let raw = (total as f64 * w / sum) as u64;
            let size = if *w == 1.0 && raw >= MIB2 {
                raw / MIB2 * MIB2
            } else {
                let s = (raw / 4 * 4).max(4096);
                if s.is_multiple_of(MIB2) {
                    s + 4096
                } else {
                    s
                }
            };
            size as usize
        })
        .collect()
}

fn new_buffer(app: &App, sched: &mut Sched, bytes: usize, rng: &mut Rng) -> Buf {
    let words = bytes / 4;
    let ptr = app.alloc(bytes);
    let seed = rng.u32();
    let model: Vec<u32> = (0..words as u64).map(|i| hash(seed, i)).collect();
    if rng.below(3) == 0 {
        app.htod(ptr, &model);
        Buf { ptr, model, last: Some(0) }
    } else {
        let s = rng.below(sched.streams.len());
        app.fill(sched.streams[s], ptr, words as u64, seed);
        Buf { ptr, model, last: Some(s) }
    }
}

pub fn oversub(app: &App, o: &Opts) -> bool {
    let total = o.bytes("total", 64 << 20);
    let n = o.num("buffers", 16).max(2) as usize;
    let ops = o.num("ops", 500) as usize;
    let nstreams = o.num("streams", 3).max(1) as usize;
    let mut rng = Rng(o.num("seed", 1));
    let cu = &app.cu;

    let mut streams = vec![null_mut()];
    streams.extend((0..nstreams).map(|i| app.stream(if i % 2 == 0 { 0 } else { CU_STREAM_NON_BLOCKING })));
    let events = (0..8).map(|_| app.event()).collect();
    let mut sched = Sched { app, streams, events, next_event: 0 };
    let mut bufs: Vec<Buf> = buffer_sizes(total, n, &mut rng).into_iter().map(|b| new_buffer(app, &mut sched, b, &mut rng)).collect();
    let mut pinned_in_flight: Vec<*mut c_void> = Vec::new();
    let mut readback: (*mut c_void, usize) = (null_mut(), 0);
    let mut mismatches = 0;
    // 2 MiB chunks of the buffers freed during the run (an upper bound on what a driver
    // layer releases because of them).
    let mut freed_chunks = 0u64;

    for op in 0..ops {
        let s = rng.below(sched.streams.len());
        let stream = sched.streams[s];
        let i = rng.below(n);
        let mut j = rng.below(n - 1);
        if j >= i {
            j += 1;
        }
        match rng.below(100) {
            0..=19 => {
                let v = rng.u32();
                sched.order(&mut bufs, &[i], s);
                app.add(stream, bufs[i].ptr, bufs[i].model.len() as u64, v);
                bufs[i].model.iter_mut().for_each(|w| *w = w.wrapping_add(v));
            }
            20..=34 => {
                let words = bufs[i].model.len().min(bufs[j].model.len());
                sched.order(&mut bufs, &[i, j], s);
                if rng.below(2) == 0 {
                    app.copy(stream, bufs[i].ptr, bufs[j].ptr, words as u64);
                } else {
                    // SAFETY: only values: two device ranges, which the driver checks, and a
                    // stream.
                    let r = unsafe { (cu.memcpy_dtod_async)(bufs[i].ptr, bufs[j].ptr, words * 4, stream) };
                    check(r, "cuMemcpyDtoDAsync");
                }
                let src = bufs[j].model[..words].to_vec();
                bufs[i].model[..words].copy_from_slice(&src);
            }
            35..=49 => {
                let words = bufs[i].model.len().min(bufs[j].model.len());
                let salt = rng.u32();
                sched.order(&mut bufs, &[i, j], s);
                app.mix(stream, bufs[i].ptr, bufs[j].ptr, words as u64, salt);
                let b = bufs[j].model[..words].to_vec();
                bufs[i].model[..words].iter_mut().zip(b).for_each(|(w, x)| *w ^= x.wrapping_add(salt));
            }
            50..=59 => {
                let len = bufs[i].model.len();
                let off = rng.below(len);
                let count = 1 + rng.below((len - off).min(256 << 10));
                let v = rng.u32();
                sched.order(&mut bufs, &[i], s);
                // SAFETY: only values: a device range, which the driver checks, the word to
                // set, and a stream.
                let r = unsafe { (cu.memset_d32_async)(bufs[i].ptr + off as u64 * 4, v, count, stream) };
                check(r, "cuMemsetD32Async");
                bufs[i].model[off..off + count].fill(v);
            }
            60..=69 => {
                let len = bufs[i].model.len();
                let off = rng.below(len);
                let count = 1 + rng.below((len - off).min(64 << 10));
                let data: Vec<u32> = (0..count).map(|_| rng.u32()).collect();
                sched.order(&mut bufs, &[i], s);
                let dst = bufs[i].ptr + off as u64 * 4;
                if rng.below(2) == 0 {
                    let mut h = null_mut();
                    // SAFETY: the driver writes the new pinned allocation's address to `h`, a
                    // live local.
                    check(unsafe { (cu.mem_alloc_host)(&mut h, count * 4) }, "cuMemAllocHost");
                    // SAFETY: `h` is a new pinned allocation of `count * 4` bytes
                    // (page-aligned, so aligned for `u32`), apart from `data`, which holds
                    // `count` words.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), h as *mut u32, count) };
                    // SAFETY: `h` holds `count * 4` bytes and is freed only at the end, after
                    // `cuCtxSynchronize` (it is kept in `pinned_in_flight`).
                    check(unsafe { (cu.memcpy_htod_async)(dst, h, count * 4, stream) }, "cuMemcpyHtoDAsync");
                    pinned_in_flight.push(h);
                } else {
                    let mut pageable = data.clone();
                    // SAFETY: the driver takes a pageable source's `count * 4` bytes, all in
                    // `pageable`, before it returns.
                    let r = unsafe { (cu.memcpy_htod_async)(dst, pageable.as_ptr() as *const c_void, count * 4, stream) };
                    check(r, "cuMemcpyHtoDAsync");
                    // The copy took its source at call time: reusing the buffer is allowed.
                    pageable.fill(0xdead_beef);
                }
                bufs[i].model[off..off + count].copy_from_slice(&data);
            }
            70..=79 => {
                let words = bufs[i].model.len();
                sched.order(&mut bufs, &[i], s);
                let got = if rng.below(2) == 0 {
                    if readback.1 < words * 4 {
                        if !readback.0.is_null() {
                            // SAFETY: `readback.0` is a pinned allocation of this program's,
                            // with no copy into it in flight: each is waited for right after it
                            // is issued.
                            check(unsafe { (cu.mem_free_host)(readback.0) }, "cuMemFreeHost");
                        }
                        let mut h = null_mut();
                        // SAFETY: the driver writes the new pinned allocation's address to `h`,
                        // a live local.
                        check(unsafe { (cu.mem_alloc_host)(&mut h, words * 4) }, "cuMemAllocHost");
                        readback = (h, words * 4);
                    }
                    // SAFETY: `readback.0` holds at least `words * 4` bytes (made so above) and
                    // lives until after the `sync` below.
                    check(unsafe { (cu.memcpy_dtoh_async)(readback.0, bufs[i].ptr, words * 4, stream) }, "cuMemcpyDtoHAsync");
                    app.sync(stream);
                    // SAFETY: the copy into `readback.0` wrote its `words` words and has
                    // completed (`sync` above); pinned memory is page-aligned, so aligned for
                    // `u32`.
                    unsafe { std::slice::from_raw_parts(readback.0 as *const u32, words) }.to_vec()
                } else {
                    // Pageable destination: the call returns once the copy is done.
                    let mut v = vec![0u32; words];
                    // SAFETY: `v` holds the `words * 4` bytes the driver writes, and with a
                    // pageable destination the call returns once the copy is done.
                    let r = unsafe { (cu.memcpy_dtoh_async)(v.as_mut_ptr() as *mut c_void, bufs[i].ptr, words * 4, stream) };
                    check(r, "cuMemcpyDtoHAsync");
                    v
                };
                if mismatch(&format!("op {op}: read-back of buffer {i}"), &got, &bufs[i].model) {
                    mismatches += 1;
                }
            }
            80..=84 => app.sync(stream),
            85..=89 => {
                sched.quiesce(&bufs[i]);
                app.free(bufs[i].ptr);
                freed_chunks += (bufs[i].model.len() as u64 * 4).div_ceil(2 << 20);
                bufs[i] = new_buffer(app, &mut sched, bufs[i].model.len() * 4, &mut rng);
            }
            _ => {
                let seed = rng.u32();
                sched.order(&mut bufs, &[i], s);
                app.fill(stream, bufs[i].ptr, bufs[i].model.len() as u64, seed);
                bufs[i].model.iter_mut().enumerate().for_each(|(k, w)| *w = hash(seed, k as u64));
            }
        }
    }

    app.ctx_sync();
    // Before the final read-backs and frees: what the run itself cost in VMM calls.
    if o.get("counters").is_some() {
        let c = app.counters();
        println!(
            "counters: creates={} maps={} unmaps={} set_access={} releases={} live={} peak_live={} freed_chunks={freed_chunks}",
            c[0], c[1], c[2], c[3], c[6], c[7], c[8]
        );
    }
    for (i, b) in bufs.iter().enumerate() {
        if mismatch(&format!("final read-back of buffer {i}"), &app.dtoh(b.ptr, b.model.len()), &b.model) {
            mismatches += 1;
        }
        app.free(b.ptr);
    }
    for h in pinned_in_flight.into_iter().chain((!readback.0.is_null()).then_some(readback.0)) {
        // SAFETY: each is a pinned allocation of this program's, freed once, after
        // `cuCtxSynchronize` waited for every copy from it.
        check(unsafe { (cu.mem_free_host)(h) }, "cuMemFreeHost");
    }
    for &e in &sched.events {
        // SAFETY: only a handle this program created, by value; no host memory.
        check(unsafe { (cu.event_destroy)(e) }, "cuEventDestroy");
    }
    for &s in &sched.streams[1..] {
        // SAFETY: only a handle this program created, by value; no host memory.
        check(unsafe { (cu.stream_destroy)(s) }, "cuStreamDestroy");
    }
    let c = app.counters();
    eprintln!("standin_app: counters [creates, maps, unmaps, set_access, h2d, d2h, releases, live, peak live] = {c:?}");
    println!("oversub: {n} buffers, {ops} ops, checksum mismatches: {mismatches}");
    mismatches == 0
}

// ---------------------------------------------------------------------------------------
// shared-read, loop

/// Memory written once, then read from two streams with no event between them, as
/// PyTorch reads its weights: legal in CUDA because nothing writes it any more. Under a
/// small limit the weights are pushed out every round; stream A's read brings them back,
/// and stream B's read, issued right after, must see their contents too. B's output
/// buffer is filled on A just before (B waits for that fill only), so it is resident and
/// B's copy needs no migration of its own that would order it after A's.
pub fn shared_read(app: &App, o: &Opts) -> bool {
    let bytes = o.bytes("bytes", 4 << 20) as usize;
    let rounds = o.num("rounds", 12);
    let others = o.num("others", 6) as usize;
    let words = (bytes / 4) as u64;
    let (a, b) = (app.stream(CU_STREAM_NON_BLOCKING), app.stream(CU_STREAM_NON_BLOCKING));
    let weights = app.alloc(bytes);
    app.fill(a, weights, words, 7);
    app.sync(a);
    let model: Vec<u32> = (0..words).map(|i| hash(7, i)).collect();
    let scratch: Vec<u64> = (0..others).map(|_| app.alloc(bytes)).collect();
    let out = app.alloc(bytes);
    let filled = app.event();
    let mut mismatches = 0;
    for round in 0..rounds {
        for (k, &p) in scratch.iter().enumerate() {
            app.fill(a, p, words, round as u32 * 31 + k as u32);
        }
        app.fill(a, out, words, 0);
        app.record(filled, a);
        app.copy(a, scratch[0], weights, words);
        app.wait_event(b, filled);
        app.copy(b, out, weights, words);
        app.sync(b);
        if mismatch(&format!("round {round}: stream B's copy of the weights"), &app.dtoh(out, words as usize), &model) {
            mismatches += 1;
        }
        app.sync(a);
    }
    println!("shared-read: {rounds} rounds, mismatches: {mismatches}");
    mismatches == 0
}

/// `loop`: the same sequence of kernels over the same buffers every round, as a training
/// loop runs; under a limit below the buffers' total, the order of eviction decides how
/// much comes back every round. `--sync-every N` synchronizes after every N kernels, as a
/// decoder does after each step.
pub fn loop_rounds(app: &App, o: &Opts) -> bool {
    let (n, bytes, rounds) = (o.num("buffers", 8) as usize, o.bytes("bytes", 4 << 20) as usize, o.num("rounds", 10) as u32);
    let flip = o.num("reverse-every", 0) as u32;
    let sync_every = o.num("sync-every", 0) as usize;
    let words = (bytes / 4) as u64;
    let s = app.stream(CU_STREAM_NON_BLOCKING);
    let bufs: Vec<u64> = (0..n).map(|_| app.alloc(bytes)).collect();
    for (k, &p) in bufs.iter().enumerate() {
        app.fill(s, p, words, k as u32);
    }
    for round in 0..rounds {
        let reversed = flip > 0 && (round / flip) % 2 == 1;
        for k in 0..n {
            app.add(s, bufs[if reversed { n - 1 - k } else { k }], words, 1);
            if sync_every > 0 && (round as usize * n + k + 1).is_multiple_of(sync_every) {
                app.sync(s);
            }
        }
    }
    app.sync(s);
    let mut mismatches = 0;
    for (k, &p) in bufs.iter().enumerate() {
        let want: Vec<u32> = (0..words).map(|i| hash(k as u32, i).wrapping_add(rounds)).collect();
        if mismatch(&format!("buffer {k}"), &app.dtoh(p, words as usize), &want) {
            mismatches += 1;
        }
    }
    if o.get("free").is_some() {
        bufs.iter().for_each(|&p| app.free(p));
    }
    println!("loop: {n} buffers, {rounds} rounds, mismatches: {mismatches}");
    mismatches == 0
}
