//! gmux's eBPF policy programs, in the manner of gpu_ext: programs that hooks in gmux's
//! decisions call, written in C and compiled to eBPF, proven safe by [`verify`] before
//! anything runs them.
//!
//! A verified program terminates (no jump goes backwards, and a program has at most
//! [`MAX_INSNS`] instructions), reads only initialized registers and stack, touches
//! memory only inside its context, its stack and the map values it looked up (with every
//! offset in bounds, pointer arithmetic tracked), writes only the context fields its
//! hook makes writable, never stores or returns a pointer, and calls only the helpers its
//! hook allows. Division and remainder by zero are defined as in Linux's eBPF: `x / 0`
//! is 0 and `x % 0` is `x`. Atomic instructions are refused (rbpf cannot run them).
//!
//! A [`Program`] is a verified program with its [`Map`]s, compiled by rbpf's JIT on
//! x86-64 and interpreted elsewhere.

pub mod attached;
pub mod elf;
pub mod helper;
pub mod hooks;
pub mod map;
pub mod policy;
pub mod program;
pub mod sched;
pub mod verify;

pub use attached::{AttachedMemory, AttachedPolicy, MapSnapshot};
pub use helper::Helper;
pub use map::{Entry, Map, MapDef, MapKind};
pub use policy::Policy;
pub use program::Program;
pub use verify::{verify, Refusal};

/// The most instructions a program may have.
pub const MAX_INSNS: usize = 4096;

/// Bytes of stack a program has, below `r10`.
pub const STACK_BYTES: i64 = 512;

/// What a hook gives its programs.
#[derive(Debug, Clone, Copy)]
pub struct HookSpec {
    /// The hook's name, for messages.
    pub name: &'static str,
    /// Bytes of its context (`r1` points to it at entry).
    pub ctx_size: u32,
    /// Byte ranges of the context a program may write (the rest is read-only).
    pub writable: &'static [(u32, u32)],
    /// The helpers its programs may call.
    pub helpers: &'static [Helper],
}
