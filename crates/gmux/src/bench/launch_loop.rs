//! The child of `gmux bench launch` (`gmux bench launch-loop`): loads the driver as any
//! program does (`dlopen("libcuda.so.1")`, `dlsym`), so that under `gmux run` every call
//! goes through `libgmux.so`, and times launches of two kernels loaded from PTX text.
//!
//! A process's launch rate moves by tenths of a microsecond from one process to the next,
//! more than what gmux adds, so the loop also finds the driver's own `cuLaunchKernel`
//! (glibc's `dlsym`, past gmux's override) and alternates blocks of launches through the
//! program's entry point and through the driver's, in the same process: the difference
//! of each pair of blocks is what gmux adds, free of what differs between processes.
//! Natively both are the driver's, and the difference shows the method's noise.

use crate::Failure;
use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::time::Instant;

/// Options of the child that launches (`gmux bench launch-loop`).
#[derive(Debug, clap::Args)]
pub struct LoopArgs {
    /// Launches per kernel through each entry point (a multiple of 20: in 20 blocks).
    #[arg(long, default_value_t = 200_000)]
    pub launches: u64,
    /// The CPU the launching thread runs on.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Mark one job around the loops (`gmux_job_begin`), as a serving application does:
    /// gmux then looks at the daemon dispatcher's word at every launch.
    #[arg(long)]
    pub mark_job: bool,
}

/// One kernel's loop in one process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    /// `empty` or `buffer`.
    pub kernel: String,
    /// Wall time per launch through the program's entry point (gmux's under `gmux run`),
    /// each block's final synchronize included, µs.
    pub us_per_launch: f64,
    /// The same through the driver's own entry point, µs.
    pub direct_us: f64,
    /// The median over pairs of blocks of the difference of the two, µs.
    pub paired_added_us: f64,
    /// The GPU's name.
    pub device: String,
}

/// Pairs of blocks per kernel.
const BLOCKS: u64 = 20;

const PTX: &str = "
.version 7.0
.target sm_75
.address_size 64
.visible .entry gmux_empty() { ret; }
.visible .entry gmux_buffer(.param .u64 p) { ret; }
\0";

/// The kernels, in the order of [`PTX`]'s entries.
pub const KERNELS: [&str; 2] = ["empty", "buffer"];

/// Runs each kernel's loop and prints one JSON line each.
pub fn run(a: &LoopArgs) -> Result<(), Failure> {
    let driver = Driver::open()?;
    // Only the launching thread: the driver's and gmux's own threads, started by now,
    // stay where the system puts them.
    if let Some(cpu) = a.cpu {
        pin(cpu)?;
    }
    let job = a.mark_job.then(begin_job).transpose()?;
    for m in driver.measure(a.launches.max(BLOCKS))? {
        println!("{}", serde_json::to_string(&m).expect("serializable"));
    }
    if let Some((job, end)) = job {
        // SAFETY: a job number from gmux_job_begin, and gmux's own function.
        unsafe { end(job) };
    }
    Ok(())
}

type JobBeginFn = unsafe extern "C" fn(*const c_char, f64, *mut u64) -> c_int;
type JobEndFn = unsafe extern "C" fn(u64) -> c_int;

/// Begins a job through gmux's `gmux_job_begin`, which opens the process's serving
/// channel: returns it and `gmux_job_end`.
fn begin_job() -> Result<(u64, JobEndFn), Failure> {
    // SAFETY: dlsym with the default handle and NUL-terminated names.
    let (begin, end) = unsafe { (libc::dlsym(libc::RTLD_DEFAULT, c"gmux_job_begin".as_ptr()), libc::dlsym(libc::RTLD_DEFAULT, c"gmux_job_end".as_ptr())) };
    if begin.is_null() || end.is_null() {
        return Err(Failure::Usage("--mark-job: gmux_job_begin is not there; run the loop under `gmux run`".into()));
    }
    // SAFETY: gmux's exports have these signatures (include/gmux.h).
    let (begin, end) = unsafe { (std::mem::transmute::<Ptr, JobBeginFn>(begin), std::mem::transmute::<Ptr, JobEndFn>(end)) };
    let mut job = 0;
    // SAFETY: a NUL-terminated name and a writable job number.
    let r = unsafe { begin(c"launch-loop".as_ptr(), 0.0, &mut job) };
    if r != 0 {
        return Err(Failure::Runtime(format!("gmux_job_begin returned {r}, not 0: the serving channel did not open (is the loop a tenant of a daemon?)")));
    }
    Ok((job, end))
}

/// The median of `v`: the mean of the two middle values of an even count (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
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

type CuResult = c_int;
type Ptr = *mut c_void;
type LaunchFn = unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> CuResult;
type DlsymFn = unsafe extern "C" fn(Ptr, *const c_char) -> Ptr;

extern "C" {
    fn dlvsym(handle: Ptr, symbol: *const c_char, version: *const c_char) -> Ptr;
}

/// glibc's own `dlsym`, found in libc itself (in libdl before glibc 2.34): an override of
/// `dlsym` (gmux's) is not consulted.
fn glibc_dlsym() -> Result<DlsymFn, Failure> {
    for lib in [c"libc.so.6", c"libdl.so.2"] {
        // SAFETY: dlopen with a NUL-terminated name; RTLD_NOLOAD only finds a library
        // already loaded.
        let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            continue;
        }
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: a live handle and constant, NUL-terminated names.
            let p = unsafe { dlvsym(handle, c"dlsym".as_ptr(), version.as_ptr()) };
            if !p.is_null() {
                // SAFETY: glibc's dlsym has this signature.
                return Ok(unsafe { std::mem::transmute::<Ptr, DlsymFn>(p) });
            }
        }
    }
    Err(Failure::Runtime("cannot find glibc's own dlsym in libc.so.6 or libdl.so.2".into()))
}

/// The driver entry points the loop calls: the program's `cuLaunchKernel` (gmux's under
/// `gmux run`) and the driver's own.
struct Driver {
    launch: LaunchFn,
    direct: LaunchFn,
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
        let own = glibc_dlsym()?;
        let sym = |name: &CStr, dlsym: DlsymFn| -> Result<usize, Failure> {
            // SAFETY: `lib` is a live handle and `name` is NUL-terminated.
            let p = unsafe { dlsym(lib, name.as_ptr()) };
            if p.is_null() {
                return Err(Failure::Runtime(format!("libcuda.so.1 has no {name:?}")));
            }
            Ok(p as usize)
        };
        macro_rules! get {
            ($name:literal: $ty:ty) => {
                get!($name: $ty, libc::dlsym)
            };
            ($name:literal: $ty:ty, $dlsym:expr) => {{
                let p = sym($name, $dlsym)?;
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
        let launch = get!(c"cuLaunchKernel": LaunchFn);
        let direct = get!(c"cuLaunchKernel": LaunchFn, own);
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
        Ok(Driver { launch, direct, sync, functions, buffer, stream, name })
    }

    /// Each kernel's `n` launches through each entry point, in [`BLOCKS`] pairs of blocks
    /// (which of the two goes first alternates), after a warm-up of 2,000 each, through
    /// the program's entry point first: under gmux that makes the buffer resident, and
    /// nothing evicts it (it is all this process allocates), so the driver's own launches
    /// find it mapped.
    fn measure(&self, n: u64) -> Result<Vec<Measured>, Failure> {
        let per = n / BLOCKS;
        let mut out = Vec::new();
        for (i, kernel) in KERNELS.iter().enumerate() {
            let mut arg = self.buffer;
            let mut params: [Ptr; 1] = [(&mut arg as *mut u64).cast()];
            let params = if i == 0 { std::ptr::null_mut() } else { params.as_mut_ptr() };
            // µs per launch of `count` launches through `f`, the final synchronize included.
            let block = |f: LaunchFn, count: u64| -> Result<f64, Failure> {
                let t0 = Instant::now();
                for _ in 0..count {
                    // SAFETY: a loaded function, a live stream, and `params` matching its
                    // one u64 parameter (or none).
                    check(unsafe { f(self.functions[i], 1, 1, 1, 1, 1, 1, 0, self.stream, params, std::ptr::null_mut()) }, "cuLaunchKernel")?;
                }
                // SAFETY: a live stream.
                check(unsafe { (self.sync)(self.stream) }, "cuStreamSynchronize")?;
                Ok(t0.elapsed().as_secs_f64() * 1e6 / count as f64)
            };
            block(self.launch, 2000)?;
            block(self.direct, 2000)?;
            let (mut through, mut direct) = (Vec::new(), Vec::new());
            for b in 0..BLOCKS {
                if b % 2 == 0 {
                    through.push(block(self.launch, per)?);
                    direct.push(block(self.direct, per)?);
                } else {
                    direct.push(block(self.direct, per)?);
                    through.push(block(self.launch, per)?);
                }
            }
            let paired: Vec<f64> = through.iter().zip(&direct).map(|(t, d)| t - d).collect();
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
            out.push(Measured {
                kernel: kernel.to_string(),
                us_per_launch: mean(&through),
                direct_us: mean(&direct),
                paired_added_us: median(&paired),
                device: self.name.clone(),
            });
        }
        Ok(out)
    }
}
