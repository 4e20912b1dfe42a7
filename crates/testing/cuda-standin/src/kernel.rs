//! Registered "kernels" (host functions), their handles and parameter layout.
//!
//! Each registration yields two handles for the same code: a `CUfunction` (what
//! `cuModuleGetFunction` finds) and a `CUkernel` (what `cuLibraryGetKernel` finds).
//! Parameter queries only answer for the matching handle kind; both kinds launch.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use cuda_abi::*;

/// Which handle kind a pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleKind {
    Function,
    Kernel,
}

/// A registered kernel.
pub struct KernelInfo {
    pub name: CString,
    pub f: StandinKernel,
    pub sizes: Vec<usize>,
    pub offsets: Vec<usize>,
    /// Bytes of the parameter buffer (end of the last parameter).
    pub total: usize,
}

#[derive(Default)]
struct Registry {
    handles: HashMap<usize, (HandleKind, Arc<KernelInfo>)>,
    by_name: HashMap<CString, [usize; 2]>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Offsets as the CUDA ABI assigns them: each parameter aligned to `min(size, 8)`
/// rounded up to a power of two. Returns (offsets, total size).
pub fn layout(sizes: &[usize]) -> (Vec<usize>, usize) {
    let mut end = 0usize;
    let offsets = sizes
        .iter()
        .map(|&size| {
            let align = size.clamp(1, 8).next_power_of_two();
            let off = end.next_multiple_of(align);
            end = off + size;
            off
        })
        .collect();
    (offsets, end)
}

/// Registers `f` under `name`; returns the handle of the requested kind.
pub fn register(name: CString, f: StandinKernel, sizes: Vec<usize>, as_kernel: bool) -> *mut c_void {
    let (offsets, total) = layout(&sizes);
    let info = Arc::new(KernelInfo { name: name.clone(), f, sizes, offsets, total });
    let mut r = registry();
    let mut pair = [0usize; 2];
    for (slot, kind) in [HandleKind::Function, HandleKind::Kernel].into_iter().enumerate() {
        let h = Box::into_raw(Box::new(0u64)) as usize;
        r.handles.insert(h, (kind, info.clone()));
        pair[slot] = h;
    }
    r.by_name.insert(name, pair);
    pair[as_kernel as usize] as *mut c_void
}

/// The kernel behind a handle of either kind.
pub fn lookup(h: *mut c_void) -> Option<(HandleKind, Arc<KernelInfo>)> {
    registry().handles.get(&(h as usize)).cloned()
}

/// The handle of `kind` for the kernel registered last under `name`.
pub fn find(name: &CStr, kind: HandleKind) -> Option<*mut c_void> {
    let pair = *registry().by_name.get(name)?;
    Some(pair[(kind == HandleKind::Kernel) as usize] as *mut c_void)
}

/// `(offset, size)` of parameter `index` of a handle of `kind`.
pub fn param_info(h: *mut c_void, kind: HandleKind, index: usize) -> Result<(usize, usize), CUresult> {
    match lookup(h) {
        Some((k, info)) if k == kind => {
            let off = *info.offsets.get(index).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            Ok((off, info.sizes[index]))
        }
        _ => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// Copies a launch's parameters, from `params` (one pointer per parameter) or from an
/// `extra` list (`CU_LAUNCH_PARAM_BUFFER_POINTER`/`_SIZE`), into an 8-aligned buffer.
pub unsafe fn pack(info: &KernelInfo, params: *mut *mut c_void, extra: *mut *mut c_void) -> Result<Vec<u64>, CUresult> {
    let mut buf = vec![0u64; info.total.div_ceil(8)];
    let dst = buf.as_mut_ptr() as *mut u8;
    if !params.is_null() && !extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !params.is_null() {
        for (i, (&off, &size)) in info.offsets.iter().zip(&info.sizes).enumerate() {
            let p = *params.add(i);
            if p.is_null() {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            std::ptr::copy_nonoverlapping(p as *const u8, dst.add(off), size);
        }
    } else if !extra.is_null() {
        let (mut data, mut size) = (std::ptr::null::<u8>(), None);
        let mut i = 0;
        loop {
            match *extra.add(i) as usize {
                CU_LAUNCH_PARAM_END => break,
                CU_LAUNCH_PARAM_BUFFER_POINTER => data = *extra.add(i + 1) as *const u8,
                CU_LAUNCH_PARAM_BUFFER_SIZE => {
                    let p = *extra.add(i + 1) as *const usize;
                    size = (!p.is_null()).then(|| *p);
                }
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
            i += 2;
        }
        match size {
            Some(n) if !data.is_null() && n >= info.total => std::ptr::copy_nonoverlapping(data, dst, info.total),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    } else if !info.sizes.is_empty() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(buf)
}

thread_local! {
    static RUNNING: RefCell<Option<Arc<KernelInfo>>> = const { RefCell::new(None) };
}

/// Runs a kernel on the calling (stream) thread with a packed parameter buffer.
pub fn run(info: &Arc<KernelInfo>, mut buf: Vec<u64>) {
    let base = buf.as_mut_ptr() as *mut u8;
    // SAFETY: both callers (`cuLaunchKernel` and kernel graph nodes) pass the buffer `pack`
    // built for this `info`, which holds at least `info.total` bytes, and every offset is at
    // most `info.total`: each `base.add(o)` stays inside `buf` or one past its end.
    let args: Vec<*mut c_void> = info.offsets.iter().map(|&o| unsafe { base.add(o) } as *mut c_void).collect();
    RUNNING.with(|r| *r.borrow_mut() = Some(info.clone()));
    // SAFETY: whoever registered `info.f` vouched that it takes parameters of `info.sizes`,
    // and `args` holds one pointer per parameter to its `sizes[i]` bytes in `buf`, as the
    // `StandinKernel` ABI asks; `args` and `buf` live until the call returns.
    unsafe { (info.f)(args.as_ptr()) };
    RUNNING.with(|r| *r.borrow_mut() = None);
}

/// The name of the kernel running on this thread, for fault messages.
pub fn running_name() -> Option<String> {
    RUNNING.with(|r| r.borrow().as_ref().map(|k| k.name.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn nop(_: *const *mut c_void) {}

    #[test]
    fn offsets_follow_the_abi() {
        assert_eq!(layout(&[8, 8, 4]), (vec![0, 8, 16], 20));
        assert_eq!(layout(&[4, 8]), (vec![0, 8], 16));
        assert_eq!(layout(&[1, 2, 1, 4, 24, 4]), (vec![0, 2, 4, 8, 16, 40], 44));
        assert_eq!(layout(&[3, 4]), (vec![0, 4], 8));
    }

    #[test]
    fn handle_kinds() {
        let f = register(c"kernel_test_f".into(), nop, vec![8, 4], false);
        let k = register(c"kernel_test_k".into(), nop, vec![4, 8], true);
        assert_eq!(param_info(f, HandleKind::Function, 1), Ok((8, 4)));
        assert_eq!(param_info(f, HandleKind::Kernel, 1), Err(CUDA_ERROR_INVALID_HANDLE));
        assert_eq!(param_info(k, HandleKind::Kernel, 1), Ok((8, 8)));
        assert_eq!(param_info(k, HandleKind::Function, 0), Err(CUDA_ERROR_INVALID_HANDLE));
        assert_eq!(param_info(k, HandleKind::Kernel, 2), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(find(c"kernel_test_f", HandleKind::Function), Some(f));
        assert_eq!(find(c"kernel_test_k", HandleKind::Kernel), Some(k));
        assert!(find(c"kernel_test_k", HandleKind::Function).is_some_and(|h| h != k));
        assert!(lookup(std::ptr::null_mut()).is_none());
    }

    #[test]
    fn pack_from_params_and_extra() {
        let (_, info) = lookup(register(c"kernel_test_pack".into(), nop, vec![8, 4], false)).unwrap();
        let (mut a, mut b) = (0x1122_3344_5566_7788u64, 0xaabb_ccddu32);
        let mut params = [&mut a as *mut u64 as *mut c_void, &mut b as *mut u32 as *mut c_void];
        // SAFETY: `params` holds one pointer per parameter, to an 8-byte `a` and a 4-byte `b`,
        // matching the registered sizes [8, 4]; `extra` is null.
        let from_params = unsafe { pack(&info, params.as_mut_ptr(), std::ptr::null_mut()) }.unwrap();
        assert_eq!(from_params, vec![a, b as u64]);
        let mut raw = from_params.clone();
        let size: *mut usize = Box::into_raw(Box::new(12usize));
        let mut extra = [
            CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            raw.as_mut_ptr() as *mut c_void,
            CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            size as *mut c_void,
            CU_LAUNCH_PARAM_END as *mut c_void,
        ];
        // SAFETY: `extra` is an END-terminated key/value list whose buffer pointer is `raw`
        // (16 bytes, the declared 12 of which `pack` reads) and whose size pointer is the
        // live `size` box.
        assert_eq!(unsafe { pack(&info, std::ptr::null_mut(), extra.as_mut_ptr()) }, Ok(from_params));
        // SAFETY: `size` came from `Box::into_raw` above and is not freed until the end.
        unsafe { *size = 8 };
        // SAFETY: the same valid `extra` list; with a size of 8 below `info.total` (12),
        // `pack` refuses before reading the buffer.
        assert_eq!(unsafe { pack(&info, std::ptr::null_mut(), extra.as_mut_ptr()) }, Err(CUDA_ERROR_INVALID_VALUE));
        // SAFETY: both pointers null: `pack` reads neither and refuses a kernel with parameters.
        assert_eq!(unsafe { pack(&info, std::ptr::null_mut(), std::ptr::null_mut()) }, Err(CUDA_ERROR_INVALID_VALUE));
        // SAFETY: `size` came from `Box::into_raw`, is freed only here, and `extra` (which
        // holds a copy of it) is not used again.
        drop(unsafe { Box::from_raw(size) });
    }
}
