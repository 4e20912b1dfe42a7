//! `jobs --count N [--pings P]`: a serving application that marks its requests as jobs
//! through gmux's C functions (`gmux_job_begin`/`gmux_job_end`, found with `dlsym` as an
//! application built against `include/gmux.h` and run under the shim finds them). Each
//! of N jobs, named `small` or `large` in turn, adds 1 to a buffer and synchronizes. A
//! job ended twice and one left running follow; then P pings through the daemon's
//! dispatcher. Prints `jobs: N marked, rtt p50 X us p99 Y us, ready`, then waits for its
//! standard input to close, so that the daemon's view can be read meanwhile. Without the
//! shim's functions it prints `jobs: untracked` and exits 0.
//!
//! `jobs --long`: begins one job named `long` (estimated 1,000 s), prints `long: ready`, and
//! for each line `launch` on its standard input launches six 50 ms kernels on one
//! stream and prints `launched in X ms` (the launches wait while the daemon holds the
//! process, or keeps its queue shallow), then synchronizes and prints `synced`; for each
//! line `again NAME` it ends its job, begins one named NAME (estimated 1,000 s) and
//! prints `begun`. Ends the job when its input closes, and prints `end: R` (what
//! `gmux_job_end` returned).

use super::*;
use std::io::Read;

type Begin = unsafe extern "C" fn(*const std::ffi::c_char, f64, *mut u64) -> i32;
type End = unsafe extern "C" fn(u64) -> i32;
type Ping = unsafe extern "C" fn(u32, *mut u64) -> i32;

fn symbol<T>(name: &std::ffi::CStr) -> Option<T> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the loaded objects.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: a non-null symbol of this name has the C signature `T` (include/gmux.h).
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

pub fn jobs(app: &App, opts: &Opts) -> bool {
    let (Some(begin), Some(end), Some(ping)) = (symbol::<Begin>(c"gmux_job_begin"), symbol::<End>(c"gmux_job_end"), symbol::<Ping>(c"gmux_ping")) else {
        println!("jobs: untracked");
        return true;
    };
    if opts.get("long").is_some() {
        return long(app, begin, end);
    }
    let n = opts.num("count", 10);
    let pings = opts.num("pings", 100);
    let s = app.stream(0);
    let p = app.alloc(1 << 20);
    app.htod(p, &vec![0; 1 << 18]);
    let names = [c"small", c"large"];
    for i in 0..n {
        let mut job = 0;
        // SAFETY: a NUL-terminated name and a writable job number.
        let r = unsafe { begin(names[i as usize % 2].as_ptr(), if i % 2 == 0 { 1.5 } else { 20.0 }, &mut job) };
        check_mark(r, "gmux_job_begin");
        app.add(s, p, 1 << 18, 1);
        app.sync(s);
        // SAFETY: a job number from gmux_job_begin.
        check_mark(unsafe { end(job) }, "gmux_job_end");
    }
    let words = app.dtoh(p, 4);
    if words.iter().any(|w| *w != n as u32) {
        fail(format!("the buffer holds {words:?} after {n} adds"));
    }
    // A job ended twice, and one left running.
    let mut job = 0;
    // SAFETY: as above.
    unsafe {
        check_mark(begin(c"small".as_ptr(), 0.0, &mut job), "gmux_job_begin");
        check_mark(end(job), "gmux_job_end");
        check_mark(end(job), "gmux_job_end");
        check_mark(begin(c"large".as_ptr(), 0.0, &mut job), "gmux_job_begin");
    }
    let mut rtt: Vec<u64> = (0..pings.max(1))
        .map(|_| {
            let mut ns = 0;
            // SAFETY: a writable out-value.
            let r = unsafe { ping(1_000_000, &mut ns) };
            if r != 0 {
                fail(format!("gmux_ping returned {r}"));
            }
            ns
        })
        .collect();
    rtt.sort_unstable();
    let at = |q: f64| rtt[((rtt.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    println!("jobs: {n} marked, rtt p50 {:.1} us p99 {:.1} us, ready", at(0.5), at(0.99));
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    true
}

fn long(app: &App, begin: Begin, end: End) -> bool {
    let s = app.stream(0);
    let p = app.alloc(4096);
    let mut job = 0;
    // SAFETY: a NUL-terminated name and a writable job number.
    let r = unsafe { begin(c"long".as_ptr(), 1_000_000.0, &mut job) };
    // Standalone (1: untracked) its launches are timed all the same.
    if r != 1 {
        check_mark(r, "gmux_job_begin");
    }
    println!("long: ready");
    for line in std::io::stdin().lines().map_while(Result::ok) {
        if let Some(name) = line.trim().strip_prefix("again ") {
            let name = std::ffi::CString::new(name).expect("a line has no NUL");
            // SAFETY: a job number from gmux_job_begin.
            check_mark(unsafe { end(job) }, "gmux_job_end");
            // SAFETY: a NUL-terminated name and a writable job number.
            check_mark(unsafe { begin(name.as_ptr(), 1_000_000.0, &mut job) }, "gmux_job_begin");
            println!("begun");
            continue;
        }
        if line.trim() != "launch" {
            continue;
        }
        let t = std::time::Instant::now();
        for _ in 0..6 {
            app.slow(s, p, 50);
        }
        println!("launched in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
        app.sync(s);
        println!("synced");
    }
    // SAFETY: a job number from gmux_job_begin.
    let r = unsafe { end(job) };
    // Its daemon may be gone by now (the test kills it): the result is said, not checked.
    println!("end: {r}");
    true
}

fn check_mark(r: i32, call: &str) {
    if r != 0 {
        fail(format!("{call} returned {r} (0: sent)"));
    }
}
