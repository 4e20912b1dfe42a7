//! Working-set prediction at allocation granularity (MSched's default level): every
//! pointer-sized, 8-byte-aligned value in a kernel's parameter block that falls in an
//! allocation puts the whole allocation in the working set. Struct parameters are scanned
//! word by word, so pointers inside them count too, and TMA tensor maps in them are
//! resolved to the address they were encoded with ([`crate::tensormap`]), texture objects
//! to the memory they read ([`crate::texture`]).

use crate::cuda::*;
use crate::tensormap::{self, MAP_ALIGN, MAP_BYTES};
use gmux_core::idhash::IdMap;
use std::ffi::{c_void, CStr};

/// Parameter offsets and sizes of one kernel, from `cuFuncGetParamInfo` or (for
/// `CUkernel` handles, which the CUDA 13 runtime launches) `cuKernelGetParamInfo`.
pub type Layout = Vec<(usize, usize)>;

/// What a launch's working set is read from, found once per kernel.
#[derive(Debug)]
pub struct Kernel {
    /// Its parameters' layout; `None` where the driver could not tell.
    pub layout: Option<Layout>,
    /// It reaches memory its parameters do not point to ([`is_opaque`]).
    pub opaque: bool,
}

/// Kernels by handle.
#[derive(Debug, Default)]
pub struct Layouts {
    cache: IdMap<usize, Kernel>,
}

impl Layouts {
    /// What gmux knows of `f`, queried once.
    pub fn of(&mut self, f: CUfunction) -> &Kernel {
        self.cache.entry(f as usize).or_insert_with(|| {
            let name = kernel_name(f);
            let opaque = is_opaque(&name);
            if opaque {
                crate::log!(Debug, "kernel {name} reaches memory through pointers outside its parameters: its working set is all of this process's memory");
            }
            Kernel { layout: if opaque { None } else { query(f) }, opaque }
        })
    }
}

/// Kernels that find their buffers through pointers kept in memory rather than in their
/// parameters, by a part of their (mangled) names: NCCL's collectives read theirs from
/// work items in a queue and from the communicator's structures in device memory.
const OPAQUE: &[&str] = &["ncclDevKernel", "ncclKernel"];

/// Whether a kernel of this name may touch any memory of its process: its working set
/// cannot be seen in its parameters.
pub fn is_opaque(name: &str) -> bool {
    OPAQUE.iter().any(|p| name.contains(p))
}

fn query(f: CUfunction) -> Option<Layout> {
    let func = |i, o: &mut usize, s: &mut usize| crate::real!(cuFuncGetParamInfo(f, i, o, s));
    let kern = |i, o: &mut usize, s: &mut usize| crate::real!(cuKernelGetParamInfo(f, i, o, s));
    collect(func).or_else(|| collect(kern))
}

fn collect(get: impl Fn(usize, &mut usize, &mut usize) -> CUresult) -> Option<Layout> {
    let mut out = Vec::new();
    loop {
        let (mut off, mut size) = (0, 0);
        match get(out.len(), &mut off, &mut size) {
            CUDA_SUCCESS => out.push((off, size)),
            CUDA_ERROR_INVALID_VALUE => return Some(out),
            _ => return None,
        }
    }
}

/// Calls `visit` with every 8-byte-aligned word of the parameters.
///
/// `false` when the parameters cannot be read: `kernel_params` given but no layout.
///
/// # Safety
/// `kernel_params` / `extra` must be valid as `cuLaunchKernel` defines them.
pub unsafe fn scan(layout: Option<&Layout>, kernel_params: *mut *mut c_void, extra: *mut *mut c_void, mut visit: impl FnMut(u64)) -> bool {
    let maps = tensormap::any();
    // The texture table, locked once for the whole scan (none when no texture exists).
    let textures = crate::texture::any().then(crate::texture::table);
    // `off` is the parameter's offset in the block, for tensor-map alignment. Every call
    // below passes a `base` readable for `size` bytes: one parameter, or a range within the
    // `extra` buffer's `len` bytes.
    let mut words = |base: *const u8, off: usize, size: usize| {
        for k in 0..size / 8 {
            // SAFETY: `k * 8 + 8 <= size`, and `base` is readable for `size` bytes.
            let w = unsafe { std::ptr::read_unaligned(base.add(k * 8) as *const u64) };
            visit(w);
            if let Some(&addr) = textures.as_ref().and_then(|t| t.as_ref()?.get(&w)) {
                visit(addr);
            }
        }
        if maps && size >= MAP_BYTES {
            let mut k = (MAP_ALIGN - off % MAP_ALIGN) % MAP_ALIGN;
            while k + MAP_BYTES <= size {
                // SAFETY: `k + MAP_BYTES <= size`, and `base` is readable for `size` bytes.
                if let Some(addr) = tensormap::lookup(unsafe { std::slice::from_raw_parts(base.add(k), MAP_BYTES) }) {
                    visit(addr);
                }
                k += MAP_ALIGN;
            }
        }
    };
    if !kernel_params.is_null() {
        let Some(layout) = layout else { return false };
        for (i, &(off, size)) in layout.iter().enumerate() {
            // SAFETY: per this function's contract, `kernel_params` holds a pointer for each
            // of the kernel's parameters, which its layout lists in order, each pointing to
            // the parameter's `size` bytes.
            words(unsafe { *kernel_params.add(i) } as *const u8, off, size);
        }
        return true;
    }
    // SAFETY: per this function's contract, `extra` is null or valid as `cuLaunchKernel`
    // defines it.
    let Some((buf, len)) = (unsafe { extra_buffer(extra) }) else { return true };
    match layout {
        // SAFETY: `o + s <= len`, so `buf + o` and the `s` bytes after it lie within the
        // `len`-byte buffer.
        Some(l) => l.iter().filter(|(o, s)| o + s <= len).for_each(|&(o, s)| words(unsafe { buf.add(o) }, o, s)),
        None => words(buf, 0, len / 8 * 8),
    }
    true
}

/// The packed parameter buffer of an `extra` array (`CU_LAUNCH_PARAM_BUFFER_POINTER`).
///
/// # Safety
/// `extra` is null or valid as `cuLaunchKernel` defines it: key/value pairs ending with
/// `CU_LAUNCH_PARAM_END`, the value of `CU_LAUNCH_PARAM_BUFFER_SIZE` pointing to a `usize`.
unsafe fn extra_buffer(extra: *mut *mut c_void) -> Option<(*const u8, usize)> {
    if extra.is_null() {
        return None;
    }
    let (mut buf, mut len) = (std::ptr::null::<u8>(), None);
    let mut i = 0;
    loop {
        // SAFETY: one key/value pair of the array, which per this function's contract goes on
        // (key at `i`, value at `i + 1`) until the key `CU_LAUNCH_PARAM_END`, and whose
        // buffer-size value points to a `usize`.
        unsafe {
            match *extra.add(i) as usize {
                CU_LAUNCH_PARAM_END => break,
                CU_LAUNCH_PARAM_BUFFER_POINTER => buf = *extra.add(i + 1) as *const u8,
                CU_LAUNCH_PARAM_BUFFER_SIZE => len = Some(*(*extra.add(i + 1) as *const usize)),
                _ => {}
            }
        }
        i += 2;
    }
    (!buf.is_null()).then_some((buf, len.unwrap_or(0)))
}

/// Writes one line for a kernel launch of `f` to stderr (`GMUX_DEBUG=working-sets`), for
/// comparing predicted working sets with what the program knows of its buffers:
/// `gmux-ws<TAB>NAME<TAB>PTR:BASE:BYTES,…<TAB>RESIDENT`, one `PTR:BASE:BYTES` for each
/// parameter word that points into an allocation (`BASE` and `BYTES` as the program
/// allocated it: a slot of a pack, a range of its own), and `RESIDENT` the bytes of the
/// chunks gmux makes resident for the launch (`allocs`, with what they refer to).
pub fn log_working_set(st: &crate::state::Shim, f: CUfunction, ptrs: &[u64], allocs: &[gmux_core::AllocId]) {
    use std::fmt::Write;
    let mut hits = String::new();
    for &p in ptrs {
        if let Some(r) = st.region_of(p) {
            let _ = write!(hits, "{}{p:#x}:{:#x}:{}", if hits.is_empty() { "" } else { "," }, r.base, r.bytes);
        }
    }
    let resident: u64 = allocs.iter().filter_map(|a| st.memory.alloc(*a)).map(|a| u64::from(a.count) * gmux_core::CHUNK_BYTES).sum();
    let line = format!("gmux-ws\t{}\t{hits}\t{resident}\n", kernel_name(f));
    // SAFETY: `line` is a live buffer of `line.len()` bytes; fd 2 is the process's stderr,
    // written whole in one call, so that lines of other writers never split it.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// A kernel's name for messages, or `?`.
pub fn kernel_name(f: CUfunction) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    let ok = crate::real!(cuFuncGetName(&mut p, f)) == CUDA_SUCCESS || crate::real!(cuKernelGetName(&mut p, f)) == CUDA_SUCCESS;
    if ok && !p.is_null() {
        // SAFETY: the driver returns a NUL-terminated name it owns.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        "?".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_collectives_are_opaque_and_other_kernels_are_not() {
        for nccl in ["_Z38ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE", "ncclKernel_AllReduce_RING_LL_Sum_float"] {
            assert!(is_opaque(nccl), "{nccl}");
        }
        for other in ["_Z10add_kernelPfS_i", "ampere_sgemm_128x64_nn", "ncclish"] {
            assert!(!is_opaque(other), "{other}");
        }
    }

    #[test]
    fn scan_reads_each_parameter_word_including_struct_members() {
        let a: u64 = 0x7e00_0000_0000;
        let s: [u64; 3] = [0x7e00_0020_0000, 17, 0x7e00_0040_0010];
        let n: u32 = 5;
        let mut params = [&a as *const u64 as *mut c_void, s.as_ptr() as *mut c_void, &n as *const u32 as *mut c_void];
        let layout = vec![(0, 8), (8, 24), (32, 4)];
        let mut seen = Vec::new();
        // SAFETY: `params` holds a pointer to each parameter, of the size `layout` gives it.
        assert!(unsafe { scan(Some(&layout), params.as_mut_ptr(), std::ptr::null_mut(), |w| seen.push(w)) });
        assert_eq!(seen, vec![a, s[0], 17, s[2]]);
    }

    #[test]
    fn scan_reads_the_extra_buffer_at_the_same_offsets() {
        let mut buf = [0u8; 24];
        buf[8..16].copy_from_slice(&0x7e00_0000_1000u64.to_ne_bytes());
        let mut len = buf.len();
        let mut extra = [
            CU_LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            buf.as_mut_ptr() as *mut c_void,
            CU_LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            &mut len as *mut usize as *mut c_void,
            CU_LAUNCH_PARAM_END as *mut c_void,
        ];
        let mut seen = Vec::new();
        let layout = vec![(0, 4), (8, 8), (16, 8)];
        // SAFETY: `extra` is a well-formed array ending with `CU_LAUNCH_PARAM_END`, its buffer
        // `buf` of `len` bytes.
        assert!(unsafe { scan(Some(&layout), std::ptr::null_mut(), extra.as_mut_ptr(), |w| seen.push(w)) });
        assert_eq!(seen, vec![0x7e00_0000_1000, 0]);
        let mut all = Vec::new();
        // SAFETY: as above.
        assert!(unsafe { scan(None, std::ptr::null_mut(), extra.as_mut_ptr(), |w| all.push(w)) });
        assert_eq!(all.len(), 3, "without a layout the whole buffer is scanned");
    }

    #[test]
    fn a_tensor_map_parameter_yields_its_encoded_address() {
        #[repr(C, align(64))]
        struct Map([u8; 128]);
        let map = Map([0x5a; 128]);
        // SAFETY: `map` is a live 128-byte array.
        unsafe { tensormap::record(map.0.as_ptr(), 0x7e00_0600_0000) };
        let n: u32 = 3;
        let mut params = [&n as *const u32 as *mut c_void, map.0.as_ptr() as *mut c_void];
        let layout = vec![(0, 4), (64, 128)];
        let mut seen = Vec::new();
        // SAFETY: `params` holds a pointer to each parameter, of the size `layout` gives it.
        assert!(unsafe { scan(Some(&layout), params.as_mut_ptr(), std::ptr::null_mut(), |w| seen.push(w)) });
        assert!(seen.contains(&0x7e00_0600_0000), "{seen:x?}");
    }

    #[test]
    fn kernel_params_without_a_layout_cannot_be_scanned() {
        let mut p = [std::ptr::null_mut::<c_void>()];
        // SAFETY: without a layout, `scan` reads no parameter through `p`.
        assert!(!unsafe { scan(None, p.as_mut_ptr(), std::ptr::null_mut(), |_| {}) });
    }
}
