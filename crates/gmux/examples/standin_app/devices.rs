//! `devices --devices N --buffers B --bytes S --rounds R`: one process on N devices of
//! the stand-in (`GMUX_STANDIN_DEVICES`), each with B buffers of S bytes filled by a
//! kernel and added to R times (under a memory limit per device below B x S, every round
//! evicts and brings back). Then work that crosses devices, each step checked against a
//! host model: a `cuMemcpyDtoD` from device 0's memory to device 1's with device 1's
//! context current, a kernel on device 1 that copies from device 0's memory while device
//! 0 evicts that memory for work of its own, a `cuMemcpyPeer` back, and an upload into
//! device 0's memory from device 1's context.
//! Prints `devices: N devices, B buffers each, mismatches: K` and, per device, the most
//! physical memory `cuMemCreate` made on it at once (`device D peak BYTES`).

use super::*;

/// A device's context and buffers, with each buffer's expected contents.
struct Device {
    ctx: CUcontext,
    bufs: Vec<(u64, Vec<u32>)>,
}

pub fn devices(app: &App, o: &Opts) -> bool {
    let cu = &app.cu;
    let (n, count, bytes, rounds) = (o.num("devices", 2) as i32, o.num("buffers", 4) as usize, o.bytes("bytes", 4 << 20) as usize, o.num("rounds", 3));
    let words = bytes / 4;
    // SAFETY: only a context this program retained, by value.
    let current = |ctx| check(unsafe { (cu.ctx_set_current)(ctx) }, "cuCtxSetCurrent");
    let mut devs: Vec<Device> = (0..n)
        .map(|d| {
            let (mut dev, mut ctx) = (0, null_mut());
            // SAFETY: the driver writes the device to `dev`, a live local.
            check(unsafe { (cu.device_get)(&mut dev, d) }, "cuDeviceGet");
            // SAFETY: the driver writes the context to `ctx`, a live local.
            check(unsafe { (cu.primary_ctx_retain)(&mut ctx, dev) }, "cuDevicePrimaryCtxRetain");
            Device { ctx, bufs: Vec::new() }
        })
        .collect();
    for (d, dev) in devs.iter_mut().enumerate() {
        current(dev.ctx);
        for i in 0..count {
            let p = app.alloc(bytes);
            let seed = (d * 100 + i) as u32;
            app.fill(null_mut(), p, words as u64, seed);
            dev.bufs.push((p, (0..words as u64).map(|k| hash(seed, k)).collect()));
        }
    }
    for r in 0..rounds {
        for dev in &mut devs {
            current(dev.ctx);
            for (p, model) in &mut dev.bufs {
                app.add(null_mut(), *p, words as u64, r as u32 + 1);
                model.iter_mut().for_each(|w| *w = w.wrapping_add(r as u32 + 1));
            }
        }
    }
    let mut bad = 0;
    if n >= 2 {
        // Device 0's buffer 0 into device 1's buffer 0, from device 1's context.
        current(devs[1].ctx);
        let (src, dst) = (devs[0].bufs[0].0, devs[1].bufs[0].0);
        // SAFETY: only values: two device addresses of `bytes` each.
        check(unsafe { (cu.memcpy_dtod)(dst, src, bytes) }, "cuMemcpyDtoD (device 0 to 1)");
        devs[1].bufs[0].1 = devs[0].bufs[0].1.clone();
        // A kernel on device 1 that reads device 0's buffer 1 late (after a slow kernel on
        // its stream), while device 0 works on its other buffers on a stream of its own,
        // which evicts buffer 1 under a limit: the eviction must wait for the kernel.
        let one = 1 % count;
        let (src, dst) = (devs[0].bufs[one].0, devs[1].bufs[one].0);
        let s1 = app.stream(CU_STREAM_NON_BLOCKING);
        app.slow(s1, dst, 100);
        app.copy(s1, dst, src, words as u64);
        devs[1].bufs[one].1 = devs[0].bufs[one].1.clone();
        current(devs[0].ctx);
        let s0 = app.stream(CU_STREAM_NON_BLOCKING);
        for (i, (p, model)) in devs[0].bufs.iter_mut().enumerate().filter(|(i, _)| *i != one) {
            app.add(s0, *p, words as u64, 7 + i as u32);
            model.iter_mut().for_each(|w| *w = w.wrapping_add(7 + i as u32));
        }
        app.sync(s0);
        current(devs[1].ctx);
        app.sync(s1);
        // Device 1's last buffer back into device 0's, by cuMemcpyPeer from device 0.
        current(devs[0].ctx);
        let last = count - 1;
        let (src, dst) = (devs[1].bufs[last].0, devs[0].bufs[last].0);
        // SAFETY: only values: two device addresses of `bytes` each and their contexts.
        check(unsafe { (cu.memcpy_peer)(dst, devs[0].ctx, src, devs[1].ctx, bytes) }, "cuMemcpyPeer (device 1 to 0)");
        devs[0].bufs[last].1 = devs[1].bufs[last].1.clone();
        // An upload into device 0's memory from device 1's context.
        current(devs[1].ctx);
        let up: Vec<u32> = (0..words as u32).map(|k| k ^ 0x5a5a).collect();
        app.htod(devs[0].bufs[0].0, &up);
        devs[0].bufs[0].1 = up;
    }
    for (d, dev) in devs.iter().enumerate() {
        current(dev.ctx);
        for (i, (p, model)) in dev.bufs.iter().enumerate() {
            bad += mismatch(&format!("device {d} buffer {i}"), &app.dtoh(*p, words), model) as usize;
        }
        for (p, _) in &dev.bufs {
            app.free(*p);
        }
    }
    current(app.ctx);
    println!("devices: {n} devices, {count} buffers each, mismatches: {bad}");
    for d in 0..n as u32 {
        println!("device {d} peak {}", app.device_memory(d)[1]);
    }
    bad == 0
}
