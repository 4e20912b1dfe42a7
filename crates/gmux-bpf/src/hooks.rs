//! The hooks programs attach to, with the context each gets (`include/gmux_bpf.h`
//! declares the same structs for C), and [`PolicyHooks`]: gmux-core's memory hooks run
//! by loaded programs.

use crate::helper::Helper;
use crate::program::Program;
use crate::HookSpec;
use gmux_core::hooks::{Candidate, MemoryHooks};
use gmux_core::{ChunkId, TenantId};

/// The context of `activate` and `access` (read-only): `struct gmux_chunk_ctx`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkCtx {
    /// The chunk.
    pub chunk: u64,
    /// The access stamp (0 for `activate`).
    pub stamp: u64,
    /// Its tenant.
    pub tenant: u32,
    /// Zero.
    pub pad: u32,
}

/// The context of `evict_prepare` (read-only), one candidate: `struct gmux_evict_ctx`.
/// The program returns the candidate's rank: lower ranks leave first, equal ranks in the
/// built-in policy's order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EvictCtx {
    /// The chunk.
    pub chunk: u64,
    /// The access stamp of its last use.
    pub last_use: u64,
    /// Its next use in the forecast, or `u64::MAX` if none.
    pub next_use: u64,
    /// Its tenant.
    pub tenant: u32,
    /// The tenant the plan makes room for.
    pub requester: u32,
    /// Chunks its tenant holds in GPU memory.
    pub resident: u64,
}

/// The context of `prefetch`: `struct gmux_prefetch_ctx`. The program writes the run of
/// chunks worth bringing in, `count` from `start`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefetchCtx {
    /// The first chunk to bring in (writable).
    pub start: u64,
    /// How many, at most [`PREFETCH_MAX`] (writable).
    pub count: u32,
    /// The tenant whose command is being prepared.
    pub tenant: u32,
}

/// Most chunks one `prefetch` answer may name (`GMUX_PREFETCH_MAX`).
pub const PREFETCH_MAX: u32 = 64;

// The layouts `include/gmux_bpf.h` asserts too.
const _: () = assert!(size_of::<ChunkCtx>() == 24 && std::mem::offset_of!(ChunkCtx, tenant) == 16);
const _: () = assert!(size_of::<PrefetchCtx>() == 16 && std::mem::offset_of!(PrefetchCtx, tenant) == 12);
const _: () = assert!(size_of::<EvictCtx>() == 40 && std::mem::offset_of!(EvictCtx, next_use) == 16 && std::mem::offset_of!(EvictCtx, resident) == 32);

/// Every hook's programs may call every helper.
pub(crate) const MAP_HELPERS: &[Helper] = &[Helper::MapLookup, Helper::MapUpdate, Helper::MapDelete, Helper::Now, Helper::Trace, Helper::RingbufOutput];

/// `activate`: a chunk became resident.
pub const ACTIVATE: HookSpec = HookSpec { name: "activate", ctx_size: size_of::<ChunkCtx>() as u32, writable: &[], helpers: MAP_HELPERS };
/// `access`: a command used a chunk.
pub const ACCESS: HookSpec = HookSpec { name: "access", ctx_size: size_of::<ChunkCtx>() as u32, writable: &[], helpers: MAP_HELPERS };
/// `evict_prepare`: ranks one eviction candidate.
pub const EVICT_PREPARE: HookSpec = HookSpec { name: "evict_prepare", ctx_size: size_of::<EvictCtx>() as u32, writable: &[], helpers: MAP_HELPERS };

/// `prefetch`: names chunks worth bringing in with a command's own.
pub const PREFETCH: HookSpec = HookSpec { name: "prefetch", ctx_size: size_of::<PrefetchCtx>() as u32, writable: &[(0, 12)], helpers: MAP_HELPERS };

/// The memory hooks.
pub const MEMORY_HOOKS: [HookSpec; 4] = [ACTIVATE, ACCESS, EVICT_PREPARE, PREFETCH];

/// The hook of name `name`, memory or scheduling.
pub fn hook(name: &str) -> Option<HookSpec> {
    MEMORY_HOOKS.into_iter().chain(crate::sched::SCHED_HOOKS).find(|h| h.name == name)
}

/// gmux-core's memory hooks, each run by a loaded program where one is attached.
#[derive(Default)]
pub struct PolicyHooks {
    /// The `activate` program.
    pub activate: Option<Program>,
    /// The `access` program.
    pub access: Option<Program>,
    /// The `evict_prepare` program.
    pub evict_prepare: Option<Program>,
    /// The `prefetch` program.
    pub prefetch: Option<Program>,
    /// Runs that failed (only the interpreter can fail at run time); the built-in
    /// decision stands for them.
    pub failures: u64,
    /// The maps its programs share, by name (for the control plane to read).
    pub maps: Vec<(String, std::rc::Rc<crate::map::Map>)>,
}

/// A context struct as the bytes a program sees.
pub(crate) fn bytes_of<T: Copy>(v: &mut T) -> &mut [u8] {
    // SAFETY: `T` is one of the hooks' `repr(C)` contexts: plain integers, no padding
    // bytes left unnamed, any bit pattern valid; the slice covers exactly `v`.
    unsafe { std::slice::from_raw_parts_mut((v as *mut T).cast::<u8>(), size_of::<T>()) }
}

impl MemoryHooks for PolicyHooks {
    fn activate(&mut self, chunk: ChunkId, tenant: TenantId) {
        if let Some(p) = self.activate.as_mut() {
            let mut ctx = ChunkCtx { chunk: u64::from(chunk.0), stamp: 0, tenant: tenant.0, pad: 0 };
            self.failures += u64::from(p.run_for(bytes_of(&mut ctx), 0, tenant.0).is_err());
        }
    }

    fn access(&mut self, chunk: ChunkId, tenant: TenantId, stamp: u64) {
        if let Some(p) = self.access.as_mut() {
            let mut ctx = ChunkCtx { chunk: u64::from(chunk.0), stamp, tenant: tenant.0, pad: 0 };
            self.failures += u64::from(p.run_for(bytes_of(&mut ctx), stamp, tenant.0).is_err());
        }
    }

    fn tracks_access(&self) -> bool {
        self.access.is_some()
    }

    fn reorders(&self) -> bool {
        self.evict_prepare.is_some()
    }

    fn evict_prepare(&mut self, requester: TenantId, candidates: &mut [Candidate]) {
        let Some(p) = self.evict_prepare.as_mut() else { return };
        let mut ranks = Vec::with_capacity(candidates.len());
        for c in candidates.iter() {
            let mut ctx = EvictCtx {
                chunk: u64::from(c.chunk.0),
                last_use: c.last_use,
                next_use: c.next_use,
                tenant: c.tenant.0,
                requester: requester.0,
                resident: c.resident,
            };
            match p.run_for(bytes_of(&mut ctx), 0, c.tenant.0) {
                Ok(rank) => ranks.push(rank),
                Err(_) => {
                    self.failures += 1;
                    return;
                }
            }
        }
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by_key(|&i| ranks[i]);
        let ranked: Vec<Candidate> = order.iter().map(|&i| candidates[i]).collect();
        candidates.copy_from_slice(&ranked);
    }

    fn prefetch(&mut self, tenant: TenantId) -> Vec<ChunkId> {
        let Some(p) = self.prefetch.as_mut() else { return Vec::new() };
        let mut ctx = PrefetchCtx { start: 0, count: 0, tenant: tenant.0 };
        if p.run_for(bytes_of(&mut ctx), 0, tenant.0).is_err() {
            self.failures += 1;
            return Vec::new();
        }
        // Chunk numbers are 32-bit: a run past the last one is cut there.
        let start = u32::try_from(ctx.start).unwrap_or(u32::MAX);
        (0..ctx.count.min(PREFETCH_MAX)).map_while(|i| start.checked_add(i)).map(ChunkId).collect()
    }
}
