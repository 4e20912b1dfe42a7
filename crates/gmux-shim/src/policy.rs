//! The memory policies this process runs: those the daemon attaches to its tenant
//! (`gmux policy load`), and its own (`GMUX_POLICY`). The agent's reader loads each new
//! one from the daemon, verified and compiled, outside every lock; the agent's worker
//! attaches the new set to the planner between two plans, with the state locked, so that
//! no plan sees half of a change. `GMUX_POLICY`'s is attached when the process's memory is
//! first set up, and stays. In a process of several devices, the policies run the memory
//! of the first device it used: a policy's state knows one device's chunks.

use gmux_bpf::hooks::PolicyHooks;
use gmux_bpf::{AttachedMemory, AttachedPolicy, Policy};
use gmux_core::hooks::{Candidate, MemoryHooks, NoHooks};
use gmux_core::protocol::{hex, snapshot_entries, unhex, FromShim, MapWrite, Policies, PolicyObject, MAX_SNAPSHOT_NAME};
use gmux_core::{ChunkId, TenantId};
use gmux_cuda::device::CudaDevice;
use gmux_runtime::TenantMemory;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The set the planner runs; locked by holders of the state lock (plans and the worker),
/// and once a second by the worker to read the maps ([`snapshots`]).
static ATTACHED: Mutex<Option<AttachedMemory>> = Mutex::new(None);

/// The set the reader prepared, for the worker to attach.
static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// Most policies a process attaches at once (the daemon loads at most 16).
const MAX_ATTACHED: usize = 16;

/// The key of `GMUX_POLICY`'s policy (the daemon's are at least 2^32).
const OWN: u64 = 0;

/// The device whose memory the policies run (the first with state).
static DEVICE: OnceLock<usize> = OnceLock::new();

/// Whether the policies run device `dev`'s memory; logs once when they do not.
fn serves(dev: usize) -> bool {
    let first = *DEVICE.get_or_init(|| dev);
    if first != dev && (crate::config::config().policy.is_some() || lock(&ATTACHED).as_ref().is_some_and(|s| !s.is_empty())) {
        crate::api::refuse::once(
            &format!("policy device {dev}"),
            &format!("memory policies run device {first}'s memory in this process, not device {dev}'s, which gmux's built-in policy runs"),
            crate::log::Level::Warn,
        );
    }
    first == dev
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A change for the worker: the policies that stay (by key), and those to add.
struct Pending {
    /// The daemon's number for the tenant (`None`: not told).
    tenant: Option<u32>,
    keep: Vec<u64>,
    new: AttachedMemory,
}

/// What the daemon last listed, each policy with the key it was given here (a daemon
/// after a restart numbers its policies afresh).
static LISTED: Mutex<Listed> = Mutex::new(Listed { have: Vec::new(), next: 0 });

struct Listed {
    have: Vec<(PolicyObject, u64)>,
    next: u64,
}

/// Takes the list of device `dev`'s daemon (on the thread that reads from it): loads the policies
/// new to it and hands the set to the worker. One that fails to load is left out, and the
/// log says why.
pub fn receive(dev: usize, p: Policies) {
    // The policies of the daemons of other devices run nothing here.
    if !serves(dev) {
        return;
    }
    lock(&LISTED).receive(p);
    crate::agent::poke(DEVICE.get().copied().unwrap_or(0));
}

impl Listed {
    fn receive(&mut self, p: Policies) {
        let (mut keep, mut new, mut have) = (Vec::new(), AttachedMemory::default(), Vec::new());
        for o in p.policies.into_iter().take(MAX_ATTACHED) {
            if let Some(&(_, key)) = self.have.iter().find(|(h, _)| *h == o) {
                keep.push(key);
                have.push((o, key));
                continue;
            }
            // Unique across daemons; its low half is the daemon's number for it.
            self.next += 1 << 32;
            let key = self.next | u64::from(o.id);
            let name = format!("{} ({})", o.id, o.name);
            match load(&o) {
                Ok(hooks) => {
                    new.push(AttachedPolicy { key, name, hooks });
                    have.push((o, key));
                }
                Err(e) => crate::log!(Warn, "policy {name} is not attached to this process: {e}"),
            }
        }
        self.have = have;
        let mut pending = lock(&PENDING);
        // A list names the tenant (an empty one may be a stand-in, sent at registration).
        let mut tenant = (!self.have.is_empty()).then_some(p.tenant);
        // New policies of a change not attached yet that are still listed stay new.
        if let Some(mut old) = pending.take() {
            for np in old.new.retain(|k| !keep.contains(&k)) {
                keep.retain(|k| *k != np.key);
                new.push(np);
            }
            tenant = tenant.or(old.tenant);
        }
        *pending = Some(Pending { tenant, keep, new });
    }
}

/// `o`'s programs for the hooks it lists.
fn load(o: &PolicyObject) -> Result<PolicyHooks, String> {
    let bytes = unhex(&o.object).ok_or("its object is not hex")?;
    // A loader that panics must not take the daemon link's reader with it.
    let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Policy::load(&bytes).map(Policy::into_hooks)));
    let mut h = loaded.map_err(|_| "loading it failed inside gmux (a bug: please report it)".to_string())??;
    let listed = |name: &str| o.hooks.iter().any(|x| x == name);
    for (name, prog) in [("activate", &mut h.activate), ("access", &mut h.access), ("evict_prepare", &mut h.evict_prepare), ("prefetch", &mut h.prefetch)] {
        if !listed(name) {
            *prog = None;
        }
    }
    Ok(h)
}

/// Attaches `GMUX_POLICY`'s memory programs to a process's new memory. A policy that
/// cannot be loaded ends the process with the reason: it was asked for.
pub fn attach_own(memory: &mut TenantMemory<CudaDevice>, dev: usize) {
    let Some(path) = crate::config::config().policy.as_ref().filter(|_| serves(dev)) else { return };
    let name = path.display().to_string();
    let loaded = std::fs::read(path).map_err(|e| format!("cannot read it ({e})")).and_then(|b| Policy::load(&b)).map(Policy::into_hooks);
    let hooks = loaded.unwrap_or_else(|e| crate::log::fatal(&format!("GMUX_POLICY={name}: {e}; check it with `gmux policy check {name}`")));
    let mut set = lock(&ATTACHED);
    let s = set.get_or_insert_with(AttachedMemory::default);
    s.retain(|k| k != OWN);
    s.push(AttachedPolicy { key: OWN, name: name.clone(), hooks });
    crate::log!(Info, "policy {name} attached (GMUX_POLICY)");
    memory.set_hooks(Box::new(Planned));
}

/// Between two plans (the caller holds the state lock): attaches the set the reader
/// prepared, if any, and writes the policies' trace lines to the log (`GMUX_LOG=info`).
/// Returns those of the daemon's policies, by the daemon's number, for the daemon.
pub fn attach(memory: &mut TenantMemory<CudaDevice>, dev: usize) -> Vec<(u32, String)> {
    if !serves(dev) {
        return Vec::new();
    }
    // The writes first: one the reader takes after them may be to a policy of a list it
    // takes after them too, which stays for the next call with it.
    let writes = std::mem::take(&mut *lock(&WRITES));
    let pending = lock(&PENDING).take();
    let mut set = lock(&ATTACHED);
    if let Some(p) = pending {
        let s = set.get_or_insert_with(AttachedMemory::default);
        if let Some(t) = p.tenant {
            s.tenant = Some(TenantId(t));
        }
        for gone in s.retain(|k| k == OWN || p.keep.contains(&k)) {
            crate::log!(Info, "policy {} detached", gone.name);
        }
        let mut new = p.new;
        for n in new.retain(|_| false) {
            crate::log!(Info, "policy {} attached", n.name);
            s.push(n);
        }
        memory.set_hooks(if s.is_empty() { Box::new(NoHooks) } else { Box::new(Planned) });
    }
    if let Some(s) = set.as_mut() {
        apply_writes(s, writes);
    }
    let mut theirs = Vec::new();
    for (p, line) in set.as_mut().map(AttachedMemory::take_traces).unwrap_or_default() {
        crate::log!(Info, "policy {}: {line}", p.name);
        if p.key != OWN {
            theirs.push((p.key as u32, line));
        }
    }
    theirs
}

/// Writes to the daemon's policies' maps (`gmux policy map … update|delete`) for the
/// worker to apply between two plans, at most [`MAX_WRITES`].
static WRITES: Mutex<Vec<MapWrite>> = Mutex::new(Vec::new());

/// Most writes waiting at once; more are dropped, and logged.
const MAX_WRITES: usize = 256;

/// Takes a write to a map of one of the daemon's policies (on the thread that reads from
/// the daemon), for the worker to apply.
pub fn receive_write(dev: usize, w: MapWrite) {
    if !serves(dev) {
        return;
    }
    let mut q = lock(&WRITES);
    if q.len() >= MAX_WRITES {
        crate::log!(Warn, "a write to map {} of policy {} is dropped: {MAX_WRITES} writes wait already", w.map, w.policy);
        return;
    }
    q.push(w);
    drop(q);
    crate::agent::poke(dev);
}

/// Applies `writes` to the attached policies' maps (the caller holds the state lock,
/// between two plans).
fn apply_writes(set: &mut AttachedMemory, writes: Vec<MapWrite>) {
    for w in writes {
        let Some(p) = set.policies().iter().find(|p| p.key != OWN && p.key as u32 == w.policy) else { continue };
        let Some((_, m)) = p.hooks.maps.iter().find(|(n, _)| *n == w.map) else { continue };
        if let Some(t) = w.tenant {
            m.set_tenant(t);
        }
        let Some(key) = unhex(&w.key) else { continue };
        let done = match w.value.as_deref().map(unhex) {
            Some(Some(v)) => m.update(&key, &v),
            Some(None) => Err("its value is not hex".into()),
            None => {
                m.delete(&key);
                Ok(())
            }
        };
        match done {
            Ok(()) => crate::log!(Info, "policy {}: map {} written by `gmux policy map`", p.name, w.map),
            Err(e) => crate::log!(Warn, "policy {}: a write to map {} failed: {e}", p.name, w.map),
        }
    }
}

/// How often the maps of the daemon's policies are sent to it.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

/// Longest the last snapshots, at exit, wait for a plan or the worker to let go of the
/// maps (a thread that never does, stopped by the exit, must not hold the exit up).
const EXIT_WAIT: Duration = Duration::from_millis(200);

/// When they were sent last.
static SNAPSHOT_AT: Mutex<Option<Instant>> = Mutex::new(None);

/// What the maps of the daemon's policies hold in this process, for the daemon to show
/// (`gmux policy map dump`): once every [`SNAPSHOT_EVERY`], or now if `now` (at exit);
/// nothing while none of its policies is attached, or while a plan or the worker runs
/// them (then next time; at exit, after waiting up to [`EXIT_WAIT`] for them). Plans
/// wait while the maps are read.
pub fn snapshots(dev: usize, now: bool) -> Vec<FromShim> {
    let mut at = lock(&SNAPSHOT_AT);
    if !serves(dev) || (!now && at.is_some_and(|t| t.elapsed() < SNAPSHOT_EVERY)) {
        return Vec::new();
    }
    let waited = Instant::now();
    let set = loop {
        match ATTACHED.try_lock() {
            Ok(g) => break g,
            Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if now && waited.elapsed() < EXIT_WAIT => std::thread::sleep(Duration::from_millis(1)),
            Err(std::sync::TryLockError::WouldBlock) => return Vec::new(),
        }
    };
    let Some(set) = set.as_ref().filter(|s| !s.is_empty()) else { return Vec::new() };
    *at = Some(Instant::now());
    let maps = set.snapshots(snapshot_entries);
    maps.into_iter()
        .filter(|m| m.policy != OWN && m.map.len() <= MAX_SNAPSHOT_NAME)
        .map(|m| FromShim::MapSnapshot {
            policy: m.policy as u32,
            map: m.map,
            total: m.total as u64,
            entries: m.entries.iter().map(|(k, v)| (hex(k), hex(v))).collect(),
        })
        .collect()
}

/// The planner's hooks while policies are attached: those of [`ATTACHED`].
struct Planned;

fn with<R: Default>(f: impl FnOnce(&mut AttachedMemory) -> R) -> R {
    lock(&ATTACHED).as_mut().map(f).unwrap_or_default()
}

impl MemoryHooks for Planned {
    fn activate(&mut self, chunk: ChunkId, tenant: TenantId) {
        with(|s| s.activate(chunk, tenant));
    }
    fn access(&mut self, chunk: ChunkId, tenant: TenantId, stamp: u64) {
        with(|s| s.access(chunk, tenant, stamp));
    }
    fn tracks_access(&self) -> bool {
        with(|s| s.tracks_access())
    }
    fn reorders(&self) -> bool {
        with(|s| s.reorders())
    }
    fn evict_prepare(&mut self, requester: TenantId, candidates: &mut [Candidate]) {
        with(|s| s.evict_prepare(requester, candidates));
    }
    fn prefetch(&mut self, tenant: TenantId) -> Vec<ChunkId> {
        with(|s| s.prefetch(tenant))
    }
}
