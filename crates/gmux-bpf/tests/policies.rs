//! The policies of `policies/`, compiled by clang and attached to gmux-core's planner:
//! the eBPF LRU and OPT make the same plans as the built-in ones on random traces, move
//! for move, LFU evicts the least used chunk, and stride prefetch brings a stream's next
//! buffers in ahead. Needs clang (see tests/elf.rs).

use gmux_bpf::Policy;
use gmux_core::evict::{Eviction, Evictor, Forecast};
use gmux_core::hooks::MemoryHooks;
use gmux_core::memory::Capacities;
use gmux_core::placement::PlacementKind;
use gmux_core::planner::{Move, Planner, Request};
use gmux_core::{ChunkId, Memory, TenantId, Tenants, CHUNK_BYTES};
use proptest::prelude::*;
use std::path::Path;
use std::process::Command;

/// `policies/NAME.c` compiled (once per test process), or `None` without clang (unless
/// required).
fn policy(name: &'static str) -> Option<Vec<u8>> {
    /// Each policy's name and object (`None`: no clang).
    type Built = Vec<(&'static str, Option<Vec<u8>>)>;
    static BUILT: std::sync::Mutex<Built> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, o)) = built.iter().find(|b| b.0 == name) {
        return o.clone();
    }
    let o = compile(name);
    built.push((name, o.clone()));
    o
}

fn compile(name: &str) -> Option<Vec<u8>> {
    if Command::new("clang").arg("--version").output().is_err() {
        assert!(std::env::var_os("GMUX_REQUIRE_CLANG").is_none(), "clang is required (GMUX_REQUIRE_CLANG) but not found");
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("gmux-policy-{name}-{}.o", std::process::id()));
    let st = Command::new("clang")
        .args(["-O2", "-target", "bpf", "-c", "-I"])
        .arg(root.join("include"))
        .arg(root.join(format!("policies/{name}.c")))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("clang runs");
    assert!(st.success(), "clang failed on policies/{name}.c");
    Some(std::fs::read(&out).expect("the object"))
}

/// Replays `cmds` (tenant, chunk indices) under `eviction` with `hooks` attached, a GPU
/// budget of `budget` chunks; returns every plan's moves.
fn replay(eviction: Eviction, hooks: Option<Box<dyn MemoryHooks>>, tenants_n: u32, per: u32, budget: u64, cmds: &[(u32, Vec<u32>)]) -> Vec<Vec<Move>> {
    let mut mem = Memory::new(Capacities { gpu: Some(budget * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    for t in 0..tenants_n {
        tenants.add(&format!("t{t}")).expect("tenant");
        mem.allocate(TenantId(t), u64::from(per) * CHUNK_BYTES).expect("allocated");
    }
    let chunk = |t: u32, i: u32| ChunkId(t * per + i);
    let mut planner = Planner::new(Evictor::new(eviction), PlacementKind::TierOrder.build(0));
    if let Some(h) = hooks {
        planner.hooks = h;
    }
    let mut plans = Vec::new();
    for (i, (t, ws)) in cmds.iter().enumerate() {
        let need: Vec<ChunkId> = ws.iter().map(|&c| chunk(*t, c)).collect();
        let forecast = Forecast::from_accesses(cmds[i..].iter().flat_map(|(t, ws)| ws.iter().map(move |&c| chunk(*t, c))));
        let plan = planner.plan(&mem, &tenants, &Request { tenant: TenantId(*t), need: &need, required: need.len(), pinned: &|_| false }, &forecast);
        planner.apply(&mut mem, &plan).expect("applies");
        for (k, c) in need.iter().enumerate() {
            planner.access(&mut mem, *c, (i * 64 + k) as u64 + 1, false);
        }
        plans.push(plan.moves);
    }
    plans
}

fn trace() -> impl Strategy<Value = (u32, u32, u64, Vec<(u32, Vec<u32>)>)> {
    (1u32..4, 2u32..12).prop_flat_map(|(tenants, per)| {
        let cmd = (0..tenants, prop::collection::vec(0..per, 1..4));
        (Just(tenants), Just(per), 3u64..10, prop::collection::vec(cmd, 1..60))
    })
}

fn hooks(obj: &[u8]) -> Box<dyn MemoryHooks> {
    Box::new(Policy::load(obj).expect("loads").into_hooks())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_ebpf_lru_and_opt_plan_move_for_move_as_the_built_in_ones((tenants, per, budget, cmds) in trace()) {
        let (Some(lru), Some(opt)) = (policy("lru"), policy("opt")) else { return Ok(()) };
        let builtin = replay(Eviction::Lru, None, tenants, per, budget, &cmds);
        prop_assert_eq!(&replay(Eviction::Lru, Some(hooks(&lru)), tenants, per, budget, &cmds), &builtin);
        let builtin = replay(Eviction::Opt, None, tenants, per, budget, &cmds);
        // OPT's program over the built-in OPT's order, which it keeps only where the
        // forecast never uses a chunk: every other rank is the program's.
        prop_assert_eq!(&replay(Eviction::Opt, Some(hooks(&opt)), tenants, per, budget, &cmds), &builtin);
    }
}

#[test]
fn the_ebpf_opt_evicts_the_chunk_used_furthest_ahead_over_lru_order() {
    let Some(opt) = policy("opt") else { return };
    // Two chunks fit; chunk 2 needs room when chunk 0 is used again before chunk 1.
    let cmds = [(0, vec![0]), (0, vec![1]), (0, vec![2]), (0, vec![0]), (0, vec![1])];
    let evicted = |plans: &[Vec<Move>]| plans[2].iter().find_map(|m| if let Move::Evict { chunk, .. } = m { Some(chunk.0) } else { None });
    assert_eq!(evicted(&replay(Eviction::Lru, None, 1, 3, 2, &cmds)), Some(0), "LRU: the oldest");
    assert_eq!(evicted(&replay(Eviction::Lru, Some(hooks(&opt)), 1, 3, 2, &cmds)), Some(1), "OPT's program: the one used furthest ahead");
}

#[test]
fn quota_lru_evicts_a_tenant_over_its_quota_first() {
    let Some(quota) = policy("quota_lru") else { return };
    // Three chunks fit. Tenant 1 uses its chunk 0 first, then tenant 0 its chunks 0 and
    // 1; then tenant 1 needs its chunk 1.
    let cmds = [(1, vec![0]), (0, vec![0]), (0, vec![1]), (1, vec![1])];
    let evicted = |plans: &[Vec<Move>]| plans[3].iter().find_map(|m| if let Move::Evict { chunk, .. } = m { Some(chunk.0) } else { None });
    let chunk = |t: u32, i: u32| t * 2 + i;
    assert_eq!(evicted(&replay(Eviction::Lru, None, 2, 2, 3, &cmds)), Some(chunk(1, 0)), "LRU: tenant 1's older chunk");
    let with_quota = |chunks: u64| {
        let h = Policy::load(&quota).expect("loads");
        h.map("quota").expect("the quota map").update(&0u32.to_le_bytes(), &chunks.to_le_bytes()).expect("set");
        evicted(&replay(Eviction::Lru, Some(Box::new(h.into_hooks())), 2, 2, 3, &cmds))
    };
    assert_eq!(with_quota(1), Some(chunk(0, 0)), "tenant 0 holds 2 chunks over a quota of 1: its oldest leaves");
    assert_eq!(with_quota(2), Some(chunk(1, 0)), "within its quota: LRU");
}

#[test]
fn lfu_evicts_the_least_used_chunk_where_lru_evicts_the_oldest() {
    let Some(lfu) = policy("lfu") else { return };
    // Two chunks fit. Chunk 0 is used three times, then chunk 1 once; chunk 2 needs room.
    let cmds = [(0, vec![0]), (0, vec![0]), (0, vec![0]), (0, vec![1]), (0, vec![2])];
    let evicted = |plans: &[Vec<Move>]| plans[4].iter().find_map(|m| if let Move::Evict { chunk, .. } = m { Some(chunk.0) } else { None });
    assert_eq!(evicted(&replay(Eviction::Lru, None, 1, 3, 2, &cmds)), Some(0), "LRU: the oldest");
    let h = Policy::load(&lfu).expect("loads");
    assert_eq!(h.hooks().collect::<Vec<_>>(), ["access", "evict_prepare"]);
    let plans = replay(Eviction::Lru, Some(Box::new(h.into_hooks())), 1, 3, 2, &cmds);
    assert_eq!(evicted(&plans), Some(1), "LFU: the least used");
    let mut h = Policy::load(&lfu).expect("loads").into_hooks();
    for c in [0, 0, 0, 1, 2] {
        h.access(ChunkId(c), TenantId(0), 1);
    }
    let uses = h.access.as_ref().and_then(|p| p.maps().next()).expect("the uses map");
    let count = |c: u64| uses.get(&c.to_le_bytes()).map(|v| u64::from_le_bytes(v[..8].try_into().expect("8")));
    assert_eq!((count(0), count(1), count(2), count(3)), (Some(3), Some(1), Some(1), None), "the access program counts each use");
}

/// The first four turns (tenant, slice in ms) of two tenants whose memory fits, under
/// round robin with `rt_boost` attached: tenant 0 asks for priority `priorities[0]`,
/// tenant 1 for `priorities[1]`; `map` sets entries of its `rt` map first.
fn rt_boost_turns(obj: &[u8], priorities: [i32; 2], map: &[(u32, u64)]) -> Vec<(u32, u64)> {
    use gmux_core::arbiter::{Arbiter, Hello, Sender, Switch};
    use gmux_core::protocol::{ShimReport, PROTOCOL};
    use gmux_core::sched::Policy as Sched;
    let p = Policy::load(obj).expect("loads");
    for (t, ns) in map {
        p.map("rt").expect("the rt map").update(&t.to_le_bytes(), &ns.to_le_bytes()).expect("set");
    }
    // Taking turns all the same: no switch to amortize.
    let mut d = Arbiter::new(Some(8 << 30), None, Sched::RoundRobin, Switch::Msched);
    d.settings.always_slice = true;
    d.sched_hooks = Box::new(p.into_sched());
    for c in 0..2u64 {
        let hello = Hello { version: PROTOCOL, tenant: &format!("t{c}"), priority: priorities[c as usize], high: None, resume: None, gpu: None };
        d.admit(c, Sender { pid: 100 + c as u32, uid: 1000, admin: true, start: 1 }, &hello).expect("admitted");
        d.report(c, ShimReport { want: 1 << 30, allocated: 1 << 30, busy: true, ..Default::default() });
    }
    let (mut now, mut done, mut turns) = (0, [0u64; 2], Vec::new());
    for _ in 0..4 {
        d.decide(now);
        let (t, slice) = d.running().expect("a tenant runs");
        turns.push((t.0, slice / 1_000_000));
        // Its first command finishes: its slice starts.
        let c = u64::from(t.0);
        done[c as usize] += 1;
        let n = done[c as usize];
        d.report(c, ShimReport { held: 1 << 30, want: 1 << 30, allocated: 1 << 30, busy: true, commands: n, finished: n, ..Default::default() });
        d.decide(now + 1);
        now += slice + 2;
    }
    turns
}

#[test]
fn rt_boost_gives_latency_critical_tenants_long_turns_and_the_others_short_ones() {
    let Some(obj) = policy("rt_boost") else { return };
    // Tenant 1 asked for priority 1: latency-critical.
    assert_eq!(rt_boost_turns(&obj, [0, 1], &[]), [(0, 2), (1, 1000), (0, 2), (1, 1000)]);
    // The control plane's map overrides the class at each turn.
    assert_eq!(rt_boost_turns(&obj, [0, 1], &[(0, 300_000_000)]), [(0, 300), (1, 1000), (0, 300), (1, 1000)]);
}

/// Under strict priority with `rt_boost` attached, whether each of two busy tenants, `rt`
/// and `be`, both asking for priority 0, is gated (its commands held back for the
/// other's); `named` writes `rt` into the map `rt_names` first.
fn rt_boost_gates(obj: &[u8], named: bool) -> [bool; 2] {
    use gmux_core::arbiter::{Arbiter, Hello, Sender, Switch};
    use gmux_core::protocol::{ShimReport, PROTOCOL};
    use gmux_core::sched::Policy as Sched;
    let p = Policy::load(obj).expect("loads");
    if named {
        let key = gmux_core::hooks::short_name("rt");
        p.map("rt_names").expect("the rt_names map").update(&key, &1u64.to_le_bytes()).expect("set");
    }
    let mut d = Arbiter::new(Some(8 << 30), None, Sched::Priority, Switch::Msched);
    d.sched_hooks = Box::new(p.into_sched());
    for (c, (name, priority)) in [("rt", 0), ("be", 0)].into_iter().enumerate() {
        let hello = Hello { version: PROTOCOL, tenant: name, priority, high: None, resume: None, gpu: None };
        d.admit(c as u64, Sender { pid: 100 + c as u32, uid: 1000, admin: true, start: 1 }, &hello).expect("admitted");
        d.report(c as u64, ShimReport { want: 6 << 30, allocated: 6 << 30, busy: true, ..Default::default() });
    }
    let grants = d.decide(0);
    let gated = |c: u64| grants.iter().find(|(conn, _)| *conn == c).expect("a grant").1.inflight > 0;
    [gated(0), gated(1)]
}

/// The class comes from the program, not from what a tenant asked: named in `rt_names`,
/// `rt` goes first though it asked for 0; unnamed, neither waits for the other.
#[test]
fn rt_boost_classes_tenants_by_name_under_strict_priority() {
    let Some(obj) = policy("rt_boost") else { return };
    assert_eq!(rt_boost_gates(&obj, true), [false, true]);
    assert_eq!(rt_boost_gates(&obj, false), [false, false]);
}

#[test]
fn admission_by_headroom_refuses_a_new_tenant_when_the_budget_is_nearly_held() {
    use gmux_core::arbiter::{Arbiter, Hello, Sender, Switch};
    use gmux_core::protocol::{ShimReport, PROTOCOL};
    use gmux_core::sched::Policy as Sched;
    let Some(obj) = policy("admit_headroom") else { return };
    let mut d = Arbiter::new(Some(8 << 30), None, Sched::RoundRobin, Switch::Msched);
    d.sched_hooks = Box::new(Policy::load(&obj).expect("loads").into_sched());
    let who = |pid| Sender { pid, uid: 1000, admin: false, start: 1 };
    let hello = |tenant| Hello { version: PROTOCOL, tenant, priority: 0, high: None, resume: None, gpu: None };
    d.admit(1, who(100), &hello("a")).expect("room");
    d.decide(0);
    d.report(1, ShimReport { held: 15 << 29, ..Default::default() }); // 7.5 of 8 GiB: over 90%
    let e = d.admit(2, who(200), &hello("b")).unwrap_err();
    assert!(e.contains("refused a process of tenant \"b\""), "{e}");
    d.admit(3, who(300), &hello("a")).expect("a process of a running tenant joins");
}

/// Plans, `repeat` commands per buffer, a stream of `passes` passes over `buffers` buffers
/// of `size` chunks each with `fit` chunks of GPU memory and no forecast; returns how
/// many commands had to wait for one of their own chunks to be brought in, and the chunks
/// brought in.
fn stream(hooks: Option<Box<dyn MemoryHooks>>, buffers: u32, size: u32, fit: u64, passes: u32, repeat: u32) -> (u32, u64) {
    let mut mem = Memory::new(Capacities { gpu: Some(fit * CHUNK_BYTES), ..Default::default() });
    let mut tenants = Tenants::default();
    let t = tenants.add("t").expect("tenant");
    let allocs: Vec<_> = (0..buffers).map(|_| mem.allocate(t, u64::from(size) * CHUNK_BYTES).expect("allocated")).collect();
    let mut planner = Planner::new(Evictor::new(Eviction::Lru), PlacementKind::TierOrder.build(0));
    if let Some(h) = hooks {
        planner.hooks = h;
    }
    let (mut waits, mut brought, mut stamp) = (0, 0, 0);
    for _ in 0..passes {
        for a in allocs.iter().flat_map(|a| std::iter::repeat_n(a, repeat as usize)) {
            stamp += 1;
            let need: Vec<ChunkId> = mem.alloc(*a).expect("live").chunks().collect();
            let plan = planner.plan(&mem, &tenants, &Request { tenant: t, need: &need, required: need.len(), pinned: &|_| false }, &Forecast::default());
            assert_eq!(plan.covered, need.len());
            let arrives = |m: &Move| match m {
                Move::Create(c) | Move::Populate { chunk: c, .. } => Some(*c),
                _ => None,
            };
            waits += u32::from(plan.moves.iter().filter_map(arrives).any(|c| need.contains(&c)));
            brought += plan.moves.iter().filter_map(arrives).count() as u64;
            planner.apply(&mut mem, &plan).expect("applies");
            for c in &need {
                planner.access(&mut mem, *c, stamp, false);
            }
        }
    }
    (waits, brought)
}

#[test]
fn stride_prefetch_brings_a_streams_next_buffers_in_ahead_of_their_commands() {
    let Some(stride) = policy("stride") else { return };
    // 16 buffers of 3 chunks streamed twice, 12 chunks of GPU memory: LRU alone brings
    // every buffer in when its command comes.
    assert_eq!(stream(None, 16, 3, 12, 2, 1), (32, 96));
    let h = Policy::load(&stride).expect("loads");
    assert_eq!(h.hooks().collect::<Vec<_>>(), ["access", "prefetch", "evict_prepare"]);
    let (waits, brought) = stream(Some(Box::new(h.into_hooks())), 16, 3, 12, 2, 1);
    // Each pass, the first four commands wait while the stride is learnt (two equal
    // strides, then one plan to bring the next buffers in); the rest find theirs in.
    assert_eq!(waits, 8, "commands that waited with stride prefetch");
    // Nothing is brought in twice: what comes ahead stays until its command.
    assert_eq!(brought, 96, "chunks brought in");
    // Three commands per buffer: the stream moves once per buffer.
    let h = Policy::load(&stride).expect("loads").into_hooks();
    assert_eq!(stream(Some(Box::new(h)), 16, 3, 12, 2, 3), (8, 96));
}

/// `admit_short.c` through gmux-core's admission: a job more than four times longer than
/// an admitted running one waits, its process held; one of a kind named in `first` runs
/// at once; a job of no estimate waits while another runs.
#[test]
fn admit_short_keeps_a_long_job_waiting_beside_a_short_one() {
    use gmux_bpf::sched::SchedPolicy;
    use gmux_core::hooks::SchedHooks;
    use gmux_core::sched::dispatch::{admit, Candidate, Jobs};
    use gmux_core::TenantId;
    let Some(obj) = policy("admit_short") else { return };
    let mut s = Policy::load(&obj).expect("loads").into_sched();
    assert!(s.admits());
    const MS: u64 = 1_000_000;
    let (mut short, mut long, mut guess) = (Jobs::default(), Jobs::default(), Jobs::default());
    short.begin(1, "short", 2 * MS, 0).unwrap();
    long.begin(1, "long", 9 * MS, MS).unwrap();
    guess.begin(1, "guess", 0, MS).unwrap();
    let decide = |s: &mut SchedPolicy, short: &mut Jobs, long: &mut Jobs, guess: &mut Jobs, now| {
        let mut procs: Vec<Candidate<'_>> =
            [short, long, guess].into_iter().enumerate().map(|(i, jobs)| Candidate { tenant: TenantId(i as u32), pid: i as u32, jobs, free: true }).collect();
        admit(&mut procs, now, &mut |j| s.admission(j))
    };
    assert_eq!(decide(&mut s, &mut short, &mut long, &mut guess, 2 * MS), [false, true, true], "9 ms > 4 x 2 ms; no estimate waits");
    short.end(1, 3 * MS).unwrap();
    // The short job ended: nothing shorter runs, so the long job runs; the one of no
    // estimate still waits beside it.
    assert_eq!(decide(&mut s, &mut short, &mut long, &mut guess, 3 * MS), [false, false, true]);
    let key = gmux_core::hooks::short_name("guess");
    s.maps().find(|(n, _)| *n == "first").expect("the first map").1.update(&key, &1u64.to_le_bytes()).expect("set");
    assert_eq!(decide(&mut s, &mut short, &mut long, &mut guess, 4 * MS), [false, false, false], "named in first: at once");
    assert_eq!(s.failures, 0);
}

/// `rt_boost.c` matches a name of up to 16 bytes whole: a longer name that starts with
/// a named one is another tenant's, and asks in vain.
#[test]
fn rt_boost_matches_only_whole_names() {
    use gmux_core::hooks::{short_name, Joining, SchedHooks};
    let Some(obj) = policy("rt_boost") else { return };
    let mut s = Policy::load(&obj).expect("loads").into_sched();
    let named = "sixteen-byte-nme";
    assert_eq!(named.len(), 16);
    s.maps().find(|(n, _)| *n == "rt_names").expect("rt_names").1.update(&short_name(named), &1u64.to_le_bytes()).expect("set");
    let join = |name: &str| Joining {
        tenant: gmux_core::TenantId(0),
        new_tenant: true,
        uid: 1000,
        priority: 0,
        timeslice: 20_000_000,
        processes: 0,
        held: 0,
        budget: u64::MAX,
        name: short_name(name),
        name_len: name.len() as u32,
    };
    assert_eq!(s.task_init(&join(named)).priority, Some(1));
    assert_eq!(s.task_init(&join("sixteen-byte-nme-and-more")).priority, None, "class 0, as asked");
    assert_eq!(s.failures, 0);
}
