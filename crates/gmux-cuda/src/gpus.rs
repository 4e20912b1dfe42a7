//! The GPUs the driver shows this process (after `CUDA_VISIBLE_DEVICES`), each known by
//! its UUID: the daemon and `gmux run` ask which GPUs there are without taking the
//! driver as the shim does (a host without one gets an error, not an exit).

use crate::cuda::*;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// One GPU as the driver shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its ordinal in this process (after `CUDA_VISIBLE_DEVICES`).
    pub ordinal: i32,
    /// Its UUID as `nvidia-smi` prints it (`GPU-…`); it names the GPU's daemon.
    pub uuid: String,
    /// Its name.
    pub name: String,
    /// Its memory, bytes.
    pub total: u64,
}

/// Characters of a whole UUID as [`format_uuid`] writes it.
pub const UUID_LEN: usize = 40;

/// `uuid` as [`format_uuid`] writes it (its hex in lower case), when it is a whole one.
pub fn canonical(uuid: &str) -> Option<String> {
    let whole = uuid.len() == UUID_LEN && gmux_core::arbiter::is_gpu_uuid(uuid);
    whole.then(|| format!("{}{}", &uuid[..4], uuid[4..].to_ascii_lowercase()))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of the driver's 16 UUID bytes.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

type InitFn = unsafe extern "C" fn(c_uint) -> CUresult;
type CountFn = unsafe extern "C" fn(*mut c_int) -> CUresult;
type GetFn = unsafe extern "C" fn(*mut CUdevice, c_int) -> CUresult;
type UuidFn = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CUresult;
type NameFn = unsafe extern "C" fn(*mut c_char, c_int, CUdevice) -> CUresult;
type TotalFn = unsafe extern "C" fn(*mut usize, CUdevice) -> CUresult;

/// The address of `name` in the library `h`, as a function of type `F`.
fn entry<F>(h: *mut c_void, name: &CStr) -> Result<F, String> {
    // SAFETY: glibc's dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { crate::driver::real_dlsym()(h, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("the driver has no {}", name.to_string_lossy()));
    }
    // SAFETY: `F` is the `unsafe extern "C" fn` type of the symbol's C signature.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Fails with the call's name and code.
fn check(what: &str, r: CUresult) -> Result<(), String> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed with CUDA error {r}"))
    }
}

/// The GPUs of this process, in ordinal order; an error says why there are none to ask
/// (no driver, or it fails to start). `CUDA_VISIBLE_DEVICES=""` gives an empty list.
pub fn list() -> Result<Vec<Gpu>, String> {
    let path = crate::driver::cuda_library();
    let c = CString::new(path.clone()).map_err(|_| "GMUX_CUDA_LIB contains a NUL byte".to_string())?;
    // SAFETY: dlopen with a NUL-terminated path; the handle stays open for the process.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local C string or NULL.
        let e = unsafe { libc::dlerror() };
        let why = if e.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: a non-null dlerror result is a NUL-terminated string.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        };
        return Err(format!("cannot load the CUDA driver {path}: {why}"));
    }
    let init: InitFn = entry(h, c"cuInit")?;
    let count: CountFn = entry(h, c"cuDeviceGetCount")?;
    let get: GetFn = entry(h, c"cuDeviceGet")?;
    let uuid = uuid_entry(h)?;
    let name: NameFn = entry(h, c"cuDeviceGetName")?;
    let total: TotalFn = entry(h, c"cuDeviceTotalMem_v2")?;
    // SAFETY: each call gets pointers to live locals of the types the driver writes.
    unsafe {
        let r = init(0);
        if r == CUDA_ERROR_NO_DEVICE {
            return Ok(Vec::new());
        }
        check("cuInit", r)?;
        let mut n = 0;
        check("cuDeviceGetCount", count(&mut n))?;
        let mut gpus = Vec::new();
        for ordinal in 0..n {
            let mut dev = 0;
            check("cuDeviceGet", get(&mut dev, ordinal))?;
            let mut bytes = [0u8; 16];
            check("cuDeviceGetUuid", uuid(&mut bytes, dev))?;
            let mut text = [0 as c_char; 128];
            check("cuDeviceGetName", name(text.as_mut_ptr(), text.len() as c_int, dev))?;
            let mut mem = 0usize;
            check("cuDeviceTotalMem", total(&mut mem, dev))?;
            let name = CStr::from_ptr(text.as_ptr()).to_string_lossy().into_owned();
            gpus.push(Gpu { ordinal, uuid: format_uuid(&bytes), name, total: mem as u64 });
        }
        Ok(gpus)
    }
}

/// The GPU `which` names among `gpus`: an ordinal, a UUID, or the start of exactly one
/// UUID (as `nvidia-smi -i` takes them).
pub fn find<'a>(gpus: &'a [Gpu], which: &str) -> Result<&'a Gpu, String> {
    let known = || gpus.iter().map(|g| format!("{} {}", g.ordinal, g.uuid)).collect::<Vec<_>>().join(", ");
    if let Ok(i) = which.parse::<i32>() {
        return gpus.iter().find(|g| g.ordinal == i).ok_or_else(|| format!("there is no GPU {i}; the GPUs are: {}", known()));
    }
    let hits: Vec<&Gpu> = gpus.iter().filter(|g| g.uuid.len() >= which.len() && g.uuid[..which.len()].eq_ignore_ascii_case(which)).collect();
    match hits[..] {
        [g] => Ok(g),
        [] => Err(format!("no GPU's UUID starts with {which:?}; the GPUs are: {}", known())),
        _ => Err(format!("{which:?} starts {} GPUs' UUIDs; give more of one: {}", hits.len(), known())),
    }
}

/// `cuDeviceGetUuid_v2` of the library `h`, else the older `cuDeviceGetUuid`.
fn uuid_entry(h: *mut c_void) -> Result<UuidFn, String> {
    entry(h, c"cuDeviceGetUuid_v2").or_else(|_| entry(h, c"cuDeviceGetUuid"))
}

/// The UUID of device `ordinal` of the driver the shim uses.
pub fn uuid_of(ordinal: CUdevice) -> Result<String, CUresult> {
    let h = crate::driver::driver().handle;
    let f = uuid_entry(h).map_err(|_| CUDA_ERROR_NOT_SUPPORTED)?;
    let mut dev = 0;
    let get: GetFn = entry(h, c"cuDeviceGet").map_err(|_| CUDA_ERROR_NOT_SUPPORTED)?;
    let mut bytes = [0u8; 16];
    // SAFETY: pointers to live locals of the types the driver writes.
    let r = unsafe {
        let r = get(&mut dev, ordinal);
        if r == CUDA_SUCCESS {
            f(&mut bytes, dev)
        } else {
            r
        }
    };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    Ok(format_uuid(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(ordinal: i32, uuid: &str) -> Gpu {
        Gpu { ordinal, uuid: uuid.into(), name: "H100".into(), total: 80 << 30 }
    }

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&[0x67, 0x6d, 0x75, 0x78]);
        b[15] = 0x2a;
        assert_eq!(format_uuid(&b), "GPU-676d7578-0000-0000-0000-00000000002a");
        assert_eq!(canonical("GPU-676D7578-0000-0000-0000-00000000002A").as_deref(), Some(format_uuid(&b).as_str()), "one GPU, one socket name");
        assert_eq!(canonical("GPU-676d7578"), None, "the start of one is no UUID");
    }

    #[test]
    fn a_gpu_is_found_by_ordinal_uuid_or_unique_prefix() {
        let gpus = [gpu(0, "GPU-aa11-0"), gpu(1, "GPU-aa22-1"), gpu(2, "GPU-bb33-2")];
        assert_eq!(find(&gpus, "1").unwrap().uuid, "GPU-aa22-1");
        assert_eq!(find(&gpus, "GPU-bb33-2").unwrap().ordinal, 2);
        assert_eq!(find(&gpus, "gpu-aa2").unwrap().ordinal, 1);
        assert!(find(&gpus, "GPU-aa").unwrap_err().contains("starts 2 GPUs"));
        assert!(find(&gpus, "7").unwrap_err().contains("no GPU 7"));
        assert!(find(&gpus, "GPU-cc").unwrap_err().contains("GPU-bb33-2"), "the error lists the GPUs");
    }
}
