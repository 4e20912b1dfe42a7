//! The helpers' code, as the VM calls it. rbpf's JIT calls a helper with the stack 8
//! bytes off the 16-byte alignment the x86-64 ABI promises (it pushes an odd number of
//! words before its calls), and code that relies on the alignment (vector stores to the
//! stack) faults there. So the JIT calls each helper through an entry that realigns the
//! stack; the interpreter calls them directly.

use crate::helper::Helper;
use crate::map::Map;
use std::cell::RefCell;

/// Most trace lines a program may write per second of decision time.
pub const TRACES_PER_SECOND: u32 = 10;

/// Most trace lines kept until they are taken; older ones are dropped first.
pub const TRACES_KEPT: usize = 256;

/// What the helpers of one run reach: the decision's time and the trace lines.
#[derive(Debug, Default)]
pub(super) struct Tracer {
    pub now: u64,
    window: u64,
    in_window: u32,
    pub lines: Vec<String>,
}

thread_local! {
    /// The tracer of the program running on this thread.
    pub(super) static RUNNING: RefCell<Option<Tracer>> = const { RefCell::new(None) };
}

/// Linux's error numbers, negated, as helpers return them.
const ENOENT: u64 = -2i64 as u64;
const E2BIG: u64 = -7i64 as u64;
const ENOSPC: u64 = -28i64 as u64;

/// Helper `h` for the interpreter.
pub(super) fn for_interpreter(h: Helper) -> rbpf::ebpf::Helper {
    match h {
        Helper::MapLookup => |a, b, c, d, e| lookup(a, b, c, d, e),
        Helper::MapUpdate => |a, b, c, d, e| update(a, b, c, d, e),
        Helper::MapDelete => |a, b, c, d, e| delete(a, b, c, d, e),
        Helper::Now => |a, b, c, d, e| now(a, b, c, d, e),
        Helper::Trace => |a, b, c, d, e| trace(a, b, c, d, e),
        Helper::RingbufOutput => |a, b, c, d, e| ringbuf_output(a, b, c, d, e),
    }
}

/// Helper `h` for the JIT: its realigning entry.
#[cfg(target_arch = "x86_64")]
pub(super) fn for_jit(h: Helper) -> rbpf::ebpf::Helper {
    let entry: Sysv = match h {
        Helper::MapLookup => aligned_lookup,
        Helper::MapUpdate => aligned_update,
        Helper::MapDelete => aligned_delete,
        Helper::Now => aligned_now,
        Helper::Trace => aligned_trace,
        Helper::RingbufOutput => aligned_ringbuf_output,
    };
    // SAFETY: the JIT only takes this pointer's address and calls it with the System V
    // convention (arguments in rdi, rsi, rdx, rcx, r8; result in rax), which is the
    // entry's declared ABI; it is never called as a Rust function.
    unsafe { std::mem::transmute::<Sysv, rbpf::ebpf::Helper>(entry) }
}

#[cfg(target_arch = "x86_64")]
type Sysv = extern "sysv64" fn(u64, u64, u64, u64, u64) -> u64;

/// An entry that aligns the stack to 16 bytes, calls `$target` with the same
/// arguments, and returns its result.
macro_rules! aligned {
    ($name:ident, $target:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        extern "sysv64" fn $name(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
            core::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "and rsp, -16",
                "call {f}",
                "mov rsp, rbp",
                "pop rbp",
                "ret",
                f = sym $target,
            )
        }
    };
}

aligned!(aligned_lookup, lookup);
aligned!(aligned_update, update);
aligned!(aligned_delete, delete);
aligned!(aligned_now, now);
aligned!(aligned_trace, trace);
aligned!(aligned_ringbuf_output, ringbuf_output);

/// The `size` bytes at `p`.
///
/// # Safety
/// `p` points to `size` readable bytes (the verifier proved it of the helper's argument).
unsafe fn bytes<'a>(p: u64, size: u32) -> &'a [u8] {
    // SAFETY: per this function's contract.
    unsafe { std::slice::from_raw_parts(p as *const u8, size as usize) }
}

/// The map at `addr`.
///
/// # Safety
/// `addr` is a relocated map reference of a live program (the verifier proved the
/// helper's argument one).
unsafe fn map<'a>(addr: u64) -> &'a Map {
    // SAFETY: per this function's contract.
    unsafe { &*(addr as *const Map) }
}

extern "sysv64" fn lookup(m: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved r1 a map and r2 a pointer to its key's size of stack.
    let m = unsafe { map(m) };
    // SAFETY: as above.
    m.lookup_ptr(unsafe { bytes(key, m.def.key_size) }) as u64
}

extern "sysv64" fn update(m: u64, key: u64, value: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as for lookup; r3 points to the value's size of stack.
    let m = unsafe { map(m) };
    // SAFETY: as above.
    let (key, value) = unsafe { (bytes(key, m.def.key_size), bytes(value, m.def.value_size)) };
    m.update(key, value).map_or(E2BIG, |()| 0)
}

extern "sysv64" fn delete(m: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as for lookup.
    let m = unsafe { map(m) };
    // SAFETY: as above.
    if m.delete(unsafe { bytes(key, m.def.key_size) }) {
        0
    } else {
        ENOENT
    }
}

extern "sysv64" fn now(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    RUNNING.with(|r| r.borrow().as_ref().map_or(0, |t| t.now))
}

extern "sysv64" fn trace(fmt: u64, size: u64, arg: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved r1 points to r2 (a constant, 1 to 256) bytes of
    // initialized stack.
    let text = unsafe { bytes(fmt, size as u32) };
    let text = String::from_utf8_lossy(text.split(|b| *b == 0).next().unwrap_or_default()).into_owned();
    RUNNING.with(|r| {
        let mut r = r.borrow_mut();
        let Some(t) = r.as_mut() else { return E2BIG };
        if t.now.saturating_sub(t.window) >= 1_000_000_000 {
            (t.window, t.in_window) = (t.now, 0);
        }
        if t.in_window >= TRACES_PER_SECOND {
            return E2BIG;
        }
        t.in_window += 1;
        if t.lines.len() >= TRACES_KEPT {
            t.lines.remove(0);
        }
        t.lines.push(format!("{text} {arg}"));
        0
    })
}

extern "sysv64" fn ringbuf_output(m: u64, data: u64, size: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved r1 a ring buffer map and r2 a pointer to r3 (a
    // constant, 1 to 256) bytes of initialized stack.
    let (m, data) = unsafe { (map(m), bytes(data, size as u32)) };
    match m.output(data) {
        Ok(()) => 0,
        Err(crate::map::RingFull::TooBig) => E2BIG,
        Err(crate::map::RingFull::Full) => ENOSPC,
    }
}
