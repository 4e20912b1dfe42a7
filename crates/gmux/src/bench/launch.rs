//! `gmux bench launch`: what gmux adds to a kernel launch. The same loop of launches runs
//! natively and under `gmux run --standalone`, alternating, in child processes of this
//! executable (`gmux bench launch-loop`), which call the driver as any program does
//! (`dlopen("libcuda.so.1")`), so that under gmux every call goes through `libgmux.so`.
//! Two kernels, from PTX text loaded at run time: `empty` takes no arguments (gmux has
//! nothing to make resident), `buffer` takes a pointer to a 2 MiB allocation (resident
//! after the first launch: the path of a launch whose memory is already there).
//!
//! A process's launch rate moves by tenths of a microsecond from one process to the
//! next (which core it lands on, that core's clock), more than what gmux adds. So the
//! launching thread of both children runs pinned to the same CPU, and the added cost is the median over rounds of
//! the difference within a round (native and gmux back to back), with its range.

use crate::Failure;
use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// Options of `gmux bench launch`.
#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// Launches per measurement.
    #[arg(long, default_value_t = 200_000)]
    pub launches: u64,
    /// Rounds: each measures native, then gmux.
    #[arg(long, default_value_t = 7)]
    pub rounds: u32,
    /// The CPU both children run on (default: the last one this process may use).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// `--mem-limit` of the gmux runs.
    #[arg(long, default_value = "8G")]
    pub mem_limit: String,
    /// Folder for the JSON results.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

/// Options of the child that launches (`gmux bench launch-loop`).
#[derive(Debug, clap::Args)]
pub struct LoopArgs {
    /// Launches per kernel.
    #[arg(long, default_value_t = 200_000)]
    pub launches: u64,
    /// The CPU to run on.
    #[arg(long)]
    pub cpu: Option<usize>,
}

/// One kernel's loop in one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    /// `empty` or `buffer`.
    pub kernel: String,
    /// Wall time per launch, the final synchronize included, µs.
    pub us_per_launch: f64,
    /// Time per launch to return from `cuLaunchKernel` alone, µs.
    pub submit_us: f64,
    /// The GPU's name.
    pub device: String,
}

const PTX: &str = "
.version 7.0
.target sm_75
.address_size 64
.visible .entry gmux_empty() { ret; }
.visible .entry gmux_buffer(.param .u64 p) { ret; }
\0";

const KERNELS: [&str; 2] = ["empty", "buffer"];

/// Runs the benchmark: prints a table and writes `launch.json` under `--out`.
pub fn run(a: &LaunchArgs) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", a.out.display())))?;
    let cpu = a.cpu.or_else(last_cpu);
    let child = |gmux: bool| {
        let mut c = Command::new(&exe);
        if gmux {
            c.args(["run", "--standalone", "--mem-limit", &a.mem_limit, "--"]).arg(&exe);
        }
        c.args(["bench", "launch-loop", "--launches", &a.launches.to_string()]);
        if let Some(cpu) = cpu {
            c.args(["--cpu", &cpu.to_string()]);
        }
        c
    };
    let mut runs: Vec<(&str, u32, Measured)> = Vec::new();
    for round in 1..=a.rounds {
        for (who, gmux) in [("native", false), ("gmux", true)] {
            let out = child(gmux).output().map_err(|e| Failure::Runtime(format!("cannot run the {who} launch loop: {e}")))?;
            if !out.status.success() {
                return Err(Failure::Runtime(format!(
                    "the {who} launch loop failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no message")
                )));
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let m: Measured = serde_json::from_str(line).map_err(|e| Failure::Runtime(format!("the {who} launch loop printed {line:?}: {e}")))?;
                eprintln!("round {round}/{}: {who:<6} {:<6} {:.3} µs per launch", a.rounds, m.kernel, m.us_per_launch);
                runs.push((who, round, m));
            }
        }
    }
    let pick = |who: &str, kernel: &str, f: fn(&Measured) -> f64| -> Vec<f64> {
        runs.iter().filter(|(w, _, m)| *w == who && m.kernel == kernel).map(|(_, _, m)| f(m)).collect()
    };
    let device = runs.first().map_or(String::new(), |(_, _, m)| m.device.clone());
    let pinned = cpu.map_or("not pinned".to_string(), |c| format!("both on CPU {c}"));
    println!("{} launches per run, {} rounds (native, then gmux), {pinned}, {device}", a.launches, a.rounds);
    println!("{:<7} {:>10} {:>9} {:>10} {:>17} {:>11} {:>10}", "kernel", "native µs", "gmux µs", "added µs", "added range µs", "native sub", "gmux sub");
    let mut rows = Vec::new();
    for k in KERNELS {
        let (native, gmux) = (pick("native", k, |m| m.us_per_launch), pick("gmux", k, |m| m.us_per_launch));
        let added: Vec<f64> = gmux.iter().zip(&native).map(|(g, n)| g - n).collect();
        let (n, g, d) = (median(&native), median(&gmux), median(&added));
        let (lo, hi) = (added.iter().copied().fold(f64::INFINITY, f64::min), added.iter().copied().fold(f64::NEG_INFINITY, f64::max));
        let (ns, gs) = (median(&pick("native", k, |m| m.submit_us)), median(&pick("gmux", k, |m| m.submit_us)));
        println!("{k:<7} {n:>10.3} {g:>9.3} {d:>10.3} {:>17} {ns:>11.3} {gs:>10.3}", format!("{lo:.3} to {hi:.3}"));
        rows.push(serde_json::json!({
            "kernel": k, "native_us": n, "gmux_us": g, "added_us": d, "added_min_us": lo, "added_max_us": hi,
            "native_submit_us": ns, "gmux_submit_us": gs,
        }));
    }
    let all: Vec<serde_json::Value> = runs.iter().map(|(w, r, m)| serde_json::json!({ "who": w, "round": r, "run": m })).collect();
    let json = serde_json::json!({
        "benchmark": "launch", "device": device, "launches": a.launches, "rounds": a.rounds, "cpu": cpu, "mem_limit": a.mem_limit,
        "rows": rows, "runs": all,
    });
    let path = a.out.join("launch.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
    println!("results: {}", path.display());
    Ok(())
}

/// The median of `v` (NaN when empty).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The highest-numbered CPU this process may run on.
fn last_cpu() -> Option<usize> {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set, and the call writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: `set` was filled by the kernel; `CPU_ISSET` reads within it for every index
    // below `CPU_SETSIZE`.
    (0..libc::CPU_SETSIZE as usize).rev().find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) -> Result<(), Failure> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Failure::Usage(format!("--cpu {cpu}: there are at most {} CPUs; give one this machine has", libc::CPU_SETSIZE)));
    }
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below `CPU_SETSIZE`, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(Failure::Usage(format!("--cpu {cpu}: cannot run there ({}); give a CPU this process may use", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// The child: each kernel's loop, one JSON line each.
pub fn run_loop(a: &LoopArgs) -> Result<(), Failure> {
    let driver = Driver::open()?;
    // Only the launching thread: the driver's and gmux's own threads, started by now,
    // stay where the system puts them.
    if let Some(cpu) = a.cpu {
        pin(cpu)?;
    }
    for m in driver.measure(a.launches.max(1))? {
        println!("{}", serde_json::to_string(&m).expect("serializable"));
    }
    Ok(())
}

type CuResult = c_int;
type Ptr = *mut c_void;

/// The driver entry points the loop calls, found as a program finds them.
struct Driver {
    launch: unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> CuResult,
    sync: unsafe extern "C" fn(Ptr) -> CuResult,
    functions: [Ptr; 2],
    buffer: u64,
    stream: Ptr,
    name: String,
}

fn check(r: CuResult, call: &str) -> Result<(), Failure> {
    match r {
        0 => Ok(()),
        e => Err(Failure::Runtime(format!("{call} failed with CUDA error {e}"))),
    }
}

impl Driver {
    /// Loads the driver, makes a context current and loads the kernels.
    fn open() -> Result<Driver, Failure> {
        // SAFETY: dlopen with a valid NUL-terminated name.
        let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        if lib.is_null() {
            return Err(Failure::Runtime("cannot load libcuda.so.1: is the NVIDIA driver installed?".into()));
        }
        let sym = |name: &CStr| -> Result<usize, Failure> {
            // SAFETY: `lib` is a live handle and `name` is NUL-terminated.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            if p.is_null() {
                return Err(Failure::Runtime(format!("libcuda.so.1 has no {name:?}")));
            }
            Ok(p as usize)
        };
        macro_rules! get {
            ($name:literal: $ty:ty) => {{
                let p = sym($name)?;
                // SAFETY: the driver's entry point of this name has this C signature.
                unsafe { std::mem::transmute::<usize, $ty>(p) }
            }};
        }
        let init = get!(c"cuInit": unsafe extern "C" fn(c_uint) -> CuResult);
        let device_get = get!(c"cuDeviceGet": unsafe extern "C" fn(*mut c_int, c_int) -> CuResult);
        let device_name = get!(c"cuDeviceGetName": unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult);
        let retain = get!(c"cuDevicePrimaryCtxRetain": unsafe extern "C" fn(*mut Ptr, c_int) -> CuResult);
        let set_current = get!(c"cuCtxSetCurrent": unsafe extern "C" fn(Ptr) -> CuResult);
        let load = get!(c"cuModuleLoadData": unsafe extern "C" fn(*mut Ptr, *const c_void) -> CuResult);
        let function = get!(c"cuModuleGetFunction": unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> CuResult);
        let alloc = get!(c"cuMemAlloc_v2": unsafe extern "C" fn(*mut u64, usize) -> CuResult);
        let stream_create = get!(c"cuStreamCreate": unsafe extern "C" fn(*mut Ptr, c_uint) -> CuResult);
        let launch =
            get!(c"cuLaunchKernel": unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> CuResult);
        let sync = get!(c"cuStreamSynchronize": unsafe extern "C" fn(Ptr) -> CuResult);
        let (mut dev, mut ctx, mut module, mut buffer, mut stream) = (0, std::ptr::null_mut(), std::ptr::null_mut(), 0u64, std::ptr::null_mut());
        let mut name = [0 as c_char; 128];
        let mut functions = [std::ptr::null_mut(); 2];
        // SAFETY: each call gets valid out-pointers and the handles the calls before made.
        unsafe {
            check(init(0), "cuInit")?;
            check(device_get(&mut dev, 0), "cuDeviceGet")?;
            check(device_name(name.as_mut_ptr(), name.len() as c_int, dev), "cuDeviceGetName")?;
            check(retain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
            check(set_current(ctx), "cuCtxSetCurrent")?;
            check(load(&mut module, PTX.as_ptr().cast()), "cuModuleLoadData")?;
            check(function(&mut functions[0], module, c"gmux_empty".as_ptr()), "cuModuleGetFunction")?;
            check(function(&mut functions[1], module, c"gmux_buffer".as_ptr()), "cuModuleGetFunction")?;
            check(alloc(&mut buffer, 2 << 20), "cuMemAlloc_v2")?;
            check(stream_create(&mut stream, 1), "cuStreamCreate")?;
        }
        // SAFETY: cuDeviceGetName wrote a NUL-terminated name into the buffer.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        Ok(Driver { launch, sync, functions, buffer, stream, name })
    }

    /// Each kernel's loop of `n` launches, after a warm-up of 2,000.
    fn measure(&self, n: u64) -> Result<Vec<Measured>, Failure> {
        let mut out = Vec::new();
        for (i, kernel) in KERNELS.iter().enumerate() {
            let mut arg = self.buffer;
            let mut params: [Ptr; 1] = [(&mut arg as *mut u64).cast()];
            let params = if i == 0 { std::ptr::null_mut() } else { params.as_mut_ptr() };
            let launch = || {
                // SAFETY: a loaded function, a live stream, and `params` matching its one
                // u64 parameter (or none).
                check(unsafe { (self.launch)(self.functions[i], 1, 1, 1, 1, 1, 1, 0, self.stream, params, std::ptr::null_mut()) }, "cuLaunchKernel")
            };
            // SAFETY: a live stream.
            let sync = || check(unsafe { (self.sync)(self.stream) }, "cuStreamSynchronize");
            for _ in 0..2000 {
                launch()?;
            }
            sync()?;
            let t0 = Instant::now();
            for _ in 0..n {
                launch()?;
            }
            let submitted = t0.elapsed();
            sync()?;
            let all = t0.elapsed();
            out.push(Measured {
                kernel: kernel.to_string(),
                us_per_launch: all.as_secs_f64() * 1e6 / n as f64,
                submit_us: submitted.as_secs_f64() * 1e6 / n as f64,
                device: self.name.clone(),
            });
        }
        Ok(out)
    }
}
