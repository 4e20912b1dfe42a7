//! The scheduling hooks programs attach to in gmuxd, with their contexts
//! (`include/gmux_bpf.h` declares the same structs for C), and [`SchedPolicy`]:
//! gmux-core's scheduling hooks run by loaded programs.

use crate::hooks::MAP_HELPERS;
use crate::map::Map;
use crate::program::Program;
use crate::HookSpec;
use gmux_core::hooks::{Admission, JobAsk, Joining, SchedHooks, NAME_BYTES};
use gmux_core::{Nanos, TenantId};
use std::rc::Rc;

/// The context of `task_init`: `struct gmux_task_ctx`. `priority` and `timeslice` are
/// writable: what the program leaves there becomes the tenant's (a new tenant's slice
/// only). The program returns 0 to let the process join, anything else to refuse it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskCtx {
    /// The tenant.
    pub tenant: u32,
    /// The user the process runs as.
    pub uid: u32,
    /// The priority it asked for (writable).
    pub priority: i32,
    /// 1 if the tenant had no process before.
    pub new_tenant: u32,
    /// The tenant's `compute.timeslice`, ns (writable).
    pub timeslice: u64,
    /// Processes of all tenants before this one.
    pub processes: u32,
    /// The tenant's name's whole length: over 16, `name` holds its start.
    pub name_len: u32,
    /// GPU memory all processes hold.
    pub held: u64,
    /// The budget (`u64::MAX`: none).
    pub budget: u64,
    /// The tenant's name, its first 16 bytes, zero-padded.
    pub name: [u8; NAME_BYTES],
}

/// The context of `task_destroy` (read-only): `struct gmux_tenant_ctx`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TenantCtx {
    /// The tenant whose last process left.
    pub tenant: u32,
    /// Zero.
    pub pad: u32,
}

/// The context of `timeslice` (read-only): `struct gmux_slice_ctx`. The program returns
/// the slice, ns.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SliceCtx {
    /// The tenant whose turn comes.
    pub tenant: u32,
    /// Zero.
    pub pad: u32,
    /// The slice gmux made, ns (stretched by the switch cost where known).
    pub slice: u64,
    /// What a switch costs, ns (0 until measured).
    pub switch_cost: u64,
}

/// The context of `admission` (read-only): `struct gmux_job_ctx`. The program returns 0
/// to let the job run now, anything else to keep it waiting (it is asked again at the
/// dispatcher's next decision, and gmux lets it run after a second at most).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct JobCtx {
    /// The tenant of the process that marked it.
    pub tenant: u32,
    /// The process.
    pub pid: u32,
    /// The job's number in that process.
    pub job: u64,
    /// Its kind's name, the first 16 bytes, zero-padded.
    pub kind: [u8; NAME_BYTES],
    /// Its kind's estimated length, ns (0: none yet).
    pub estimate: u64,
    /// How long it has waited since it began, ns.
    pub waited: u64,
    /// Jobs running in every process that marks jobs.
    pub running: u32,
    /// Of those, jobs admitted.
    pub admitted: u32,
    /// The shortest estimated length among the admitted running jobs, ns (`u64::MAX`:
    /// none runs).
    pub shortest: u64,
}

// The layouts `include/gmux_bpf.h` asserts too.
const _: () = assert!(
    size_of::<TaskCtx>() == 64
        && std::mem::offset_of!(TaskCtx, name) == 48
        && std::mem::offset_of!(TaskCtx, timeslice) == 16
        && std::mem::offset_of!(TaskCtx, budget) == 40
);
const _: () = assert!(size_of::<TenantCtx>() == 8 && size_of::<SliceCtx>() == 24);
const _: () = assert!(size_of::<JobCtx>() == 64 && std::mem::offset_of!(JobCtx, kind) == 16 && std::mem::offset_of!(JobCtx, running) == 48);

/// `task_init`: a process is joining a tenant.
pub const TASK_INIT: HookSpec = HookSpec { name: "task_init", ctx_size: size_of::<TaskCtx>() as u32, writable: &[(8, 12), (16, 24)], helpers: MAP_HELPERS };
/// `task_destroy`: a tenant's last process left.
pub const TASK_DESTROY: HookSpec = HookSpec { name: "task_destroy", ctx_size: size_of::<TenantCtx>() as u32, writable: &[], helpers: MAP_HELPERS };
/// `timeslice`: the slice of a tenant's next turn.
pub const TIMESLICE: HookSpec = HookSpec { name: "timeslice", ctx_size: size_of::<SliceCtx>() as u32, writable: &[], helpers: MAP_HELPERS };

/// `admission`: whether a marked job may run now.
pub const ADMISSION: HookSpec = HookSpec { name: "admission", ctx_size: size_of::<JobCtx>() as u32, writable: &[], helpers: MAP_HELPERS };

/// The scheduling hooks.
pub const SCHED_HOOKS: [HookSpec; 4] = [TASK_INIT, TASK_DESTROY, TIMESLICE, ADMISSION];

/// gmux-core's scheduling hooks, each run by a loaded program where one is attached.
/// A failed run (only the interpreter can fail) leaves gmux's own decision.
#[derive(Default)]
pub struct SchedPolicy {
    /// The `task_init` program.
    pub task_init: Option<Program>,
    /// The `task_destroy` program.
    pub task_destroy: Option<Program>,
    /// The `timeslice` program.
    pub timeslice: Option<Program>,
    /// The `admission` program.
    pub admission: Option<Program>,
    /// Runs that failed.
    pub failures: u64,
    /// The decision time programs see (`now_ns`): the daemon's clock at its last decision.
    pub now: Nanos,
    /// The policy's maps, by name (shared with its programs, never handed out).
    pub(crate) maps: Vec<(String, Rc<Map>)>,
}

impl SchedPolicy {
    /// The trace lines its programs wrote since the last call.
    pub fn take_traces(&mut self) -> Vec<String> {
        [&mut self.task_init, &mut self.task_destroy, &mut self.timeslice, &mut self.admission].into_iter().flatten().flat_map(Program::take_traces).collect()
    }

    /// Its maps, by name.
    pub fn maps(&self) -> impl Iterator<Item = (&str, &Map)> {
        self.maps.iter().map(|(n, m)| (n.as_str(), &**m))
    }
}

// SAFETY: a policy's programs and the maps they share are reachable only through the
// policy (every reference count of its maps is held by its programs, and nothing hands
// one out), so the whole moves between threads together; the daemon calls it under its
// decision lock, one thread at a time.
unsafe impl Send for SchedPolicy {}

impl SchedHooks for SchedPolicy {
    fn clock(&mut self, now: Nanos) {
        self.now = now;
    }

    fn task_init(&mut self, j: &Joining) -> Admission {
        let Some(p) = self.task_init.as_mut() else { return Admission::default() };
        let mut ctx = TaskCtx {
            tenant: j.tenant.0,
            uid: j.uid,
            priority: j.priority,
            new_tenant: u32::from(j.new_tenant),
            timeslice: j.timeslice,
            processes: j.processes,
            name_len: j.name_len,
            held: j.held,
            budget: j.budget,
            name: j.name,
        };
        match p.run_for(crate::hooks::bytes_of(&mut ctx), self.now, j.tenant.0) {
            Ok(verdict) => Admission {
                refuse: verdict != 0,
                priority: (ctx.priority != j.priority).then_some(ctx.priority),
                timeslice: (ctx.timeslice != j.timeslice).then_some(ctx.timeslice),
            },
            Err(_) => {
                self.failures += 1;
                Admission::default()
            }
        }
    }

    /// Runs `task_destroy`, then drops the tenant's copies of the per-tenant arrays.
    fn task_destroy(&mut self, tenant: TenantId) {
        if let Some(p) = self.task_destroy.as_mut() {
            let mut ctx = TenantCtx { tenant: tenant.0, pad: 0 };
            self.failures += u64::from(p.run_for(crate::hooks::bytes_of(&mut ctx), self.now, tenant.0).is_err());
        }
        for (_, m) in &self.maps {
            m.forget_tenant(tenant.0);
        }
    }

    fn timeslice(&mut self, tenant: TenantId, slice: Nanos, switch_cost: Option<Nanos>) -> Nanos {
        let Some(p) = self.timeslice.as_mut() else { return slice };
        let mut ctx = SliceCtx { tenant: tenant.0, pad: 0, slice, switch_cost: switch_cost.unwrap_or(0) };
        p.run_for(crate::hooks::bytes_of(&mut ctx), self.now, tenant.0).unwrap_or_else(|_| {
            self.failures += 1;
            slice
        })
    }

    fn admits(&self) -> bool {
        self.admission.is_some()
    }

    /// A failed run admits the job: gmux's own decision.
    fn admission(&mut self, j: &JobAsk) -> bool {
        let Some(p) = self.admission.as_mut() else { return true };
        let mut ctx = JobCtx {
            tenant: j.tenant.0,
            pid: j.pid,
            job: j.job,
            kind: j.kind,
            estimate: j.estimate,
            waited: j.waited,
            running: j.running,
            admitted: j.admitted,
            shortest: j.shortest,
        };
        match p.run_for(crate::hooks::bytes_of(&mut ctx), self.now, j.tenant.0) {
            Ok(verdict) => verdict == 0,
            Err(_) => {
                self.failures += 1;
                true
            }
        }
    }
}
