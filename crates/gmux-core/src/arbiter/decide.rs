//! The daemon's decisions: who runs (time slicing, or all at once when everything fits
//! or under strict priority), and how much GPU memory each process may hold now.

use super::event::Event;
use super::mem_events::Sight;
use super::*;

impl Arbiter {
    /// Decides at time `now` and returns the grants that changed, by connection.
    pub fn decide(&mut self, now: Nanos) -> Vec<(u64, Grant)> {
        self.now = now;
        self.sched_hooks.clock(now);
        self.tick_pressure(now);
        let live = self.live();
        let usage: HashMap<TenantId, ShimReport> = live.iter().map(|t| (*t, self.usage(*t))).collect();
        // What a tenant holds counts only up to its newest grant: above it, it is giving
        // memory back. A process acts on the grant before the newest one while that is on
        // its way; were what it holds taken as what it may keep, its moves under the old
        // grant would be granted back to it, and the two would answer each other forever.
        // Before its first grant (a process that registered again after its daemon was
        // lost), all it holds counts.
        let granted: HashMap<TenantId, u64> =
            live.iter().map(|t| (*t, self.procs_of(*t).map(|(_, p)| p.sent.map_or(u64::MAX, |g| g.cap)).fold(0, u64::saturating_add))).collect();
        let claim = |tenants: &Tenants, t: TenantId, next_run: u64, want: u64| {
            let k = &tenants.get(t).limits;
            Claim { id: t, held: usage[&t].held.min(granted[&t]), want, low: k.low, high: k.high, next_run }
        };
        // Running at once needs each tenant's whole period, not a slice's worth; when
        // every tenant's allocations fit too, all of them: a program still touching its
        // memory for the first time uses more than its history has seen so far.
        let periods: Vec<Claim> = live.iter().map(|t| claim(&self.tenants, *t, 0, usage[t].period)).collect();
        let concurrent = self.settings.policy == Policy::Priority || (!self.settings.always_slice && all_fit(self.settings.hbm, &periods));
        let whole_of = |u: &ShimReport| u.period.max(u.allocated);
        let allocations: Vec<Claim> = live.iter().map(|t| claim(&self.tenants, *t, 0, whole_of(&usage[t]))).collect();
        let allocations_fit = all_fit(self.settings.hbm, &allocations);
        let (runs, order) = if concurrent { self.concurrent(&live, &usage) } else { self.sliced(&live, &usage, now) };
        let want = |u: &ShimReport| match (concurrent, allocations_fit) {
            (true, true) => whole_of(u),
            (true, false) => u.period,
            (false, _) => u.want,
        };
        let claims: Vec<Claim> = live.iter().map(|t| claim(&self.tenants, *t, order[t], want(&usage[t]))).collect();
        let mut caps = divide(self.settings.hbm, &claims);
        if self.settings.switch == Switch::Whole && !concurrent {
            // The baseline keeps nothing of the tenants that do not run.
            for (i, t) in live.iter().enumerate() {
                caps[i] = if runs[t] { round_up(usage[t].allocated.max(usage[t].want)).min(self.settings.hbm.unwrap_or(u64::MAX)) } else { 0 };
            }
        }
        let high = |t: &TenantId| self.tenants.get(*t).limits.high.unwrap_or(u64::MAX);
        let Some(hbm) = self.settings.hbm else {
            // No budget: each process is bounded by its high limit and its device.
            caps = live.iter().map(high).collect();
            self.note_mem_events(&live, &caps, &caps, &usage, None);
            let each: Vec<Vec<(u64, u64)>> = live.iter().zip(&caps).map(|(t, cap)| self.split(*t, *cap)).collect();
            return self.grants(&live, &caps, &each, &caps, &runs, concurrent, &usage);
        };
        let claimed = caps.clone();
        // What nobody wants is shared by the tenants that run (up to their high limits).
        let left = hbm.saturating_sub(caps.iter().fold(0, |a, c| a.saturating_add(*c)));
        let takers: Vec<usize> = (0..live.len()).filter(|&i| runs[&live[i]] && high(&live[i]) > caps[i]).collect();
        for &i in &takers {
            caps[i] = (caps[i] + left / takers.len() as u64 / CHUNK_BYTES * CHUNK_BYTES).min(high(&live[i]));
        }
        let most: Vec<u64> = live.iter().map(|t| hbm.min(high(t))).collect();
        self.note_mem_events(&live, &caps, &claimed, &usage, Some(hbm));
        let now_caps = self.within_reach(&live, &caps, &order, hbm);
        self.grants(&live, &caps, &now_caps, &most, &runs, concurrent, &usage)
    }

    /// Each process's cap now, by tenant: toward its share of its tenant's target
    /// `caps[i]`, as far as the budget allows. A process may hold what it reported, or up to
    /// the largest cap it was sent and has not yet reported back on: that much is reserved
    /// for it. What no process reserves is free, and goes to the processes that grow, in
    /// order of their tenant's next run; a shrinking process's memory is free once it
    /// reports so. So the caps all processes may have applied never add up past the budget.
    /// While a previous daemon's processes may still hold memory unseen, nobody grows.
    fn within_reach(&self, live: &[TenantId], caps: &[u64], order: &HashMap<TenantId, u64>, hbm: u64) -> Vec<Vec<(u64, u64)>> {
        let reserve = |conn: &u64| self.procs.get(conn).map_or(0, Proc::may_hold);
        let reserved = self.procs.keys().map(reserve).fold(0, u64::saturating_add);
        let mut free = if self.recovering() { 0 } else { hbm.saturating_sub(reserved) };
        let mut now: Vec<Vec<(u64, u64)>> = live.iter().zip(caps).map(|(t, cap)| self.split(*t, *cap)).collect();
        let mut by_run: Vec<usize> = (0..live.len()).collect();
        by_run.sort_by_key(|&i| (order[&live[i]], live[i]));
        for i in by_run {
            for (conn, cap) in &mut now[i] {
                let r = reserve(conn);
                if *cap > r {
                    let more = (*cap - r).min(free) / CHUNK_BYTES * CHUNK_BYTES;
                    *cap = r + more;
                    free -= more;
                }
            }
        }
        now
    }

    /// The grants of every process, keeping those that changed.
    #[allow(clippy::too_many_arguments)]
    fn grants(
        &mut self,
        live: &[TenantId],
        caps: &[u64],
        now_caps: &[Vec<(u64, u64)>],
        most: &[u64],
        runs: &HashMap<TenantId, bool>,
        concurrent: bool,
        usage: &HashMap<TenantId, ShimReport>,
    ) -> Vec<(u64, Grant)> {
        let mut out = Vec::new();
        // The tenants holding more than their caps (evicting): at most the first two matter.
        let over: Vec<usize> = (0..live.len()).filter(|&j| usage[&live[j]].held > caps[j]).take(2).collect();
        let top = live.iter().map(|u| self.tenants.get(*u).priority).max().unwrap_or(0);
        for (i, t) in live.iter().enumerate() {
            let now_cap = now_caps[i].iter().map(|(_, c)| *c).fold(0, u64::saturating_add);
            let evicting = over.iter().any(|&j| j != i);
            let (run, fill) = match self.settings.switch {
                _ if concurrent => (runs[t], Fill::None),
                Switch::Msched => (runs[t], Fill::Forecast),
                Switch::Whole => (runs[t] && !evicting && now_cap >= caps[i], Fill::Whole),
            };
            if let Some(r) = self.running.as_mut().filter(|r| r.tenant == *t && !concurrent) {
                // In once it holds all but an eighth of what it wants within its target:
                // a process's fill stops a little short of its cap.
                let goal = usage[t].want.min(caps[i]);
                r.observe_memory(usage[t].held.saturating_add(goal / 8) >= goal, self.now);
            }
            if runs[t] && !concurrent && self.running.is_some_and(|r| !r.waited_logged && r.switching_longer_than(10, self.now)) {
                self.log_long_switch(live, i, caps, now_cap, usage);
            }
            let gated = concurrent && self.settings.policy == Policy::Priority && !runs[t];
            let inflight = if gated || (self.settings.policy == Policy::Priority && self.tenants.get(*t).priority < top) { GATED_INFLIGHT } else { 0 };
            out.extend(now_caps[i].iter().map(|(conn, cap)| (*conn, Grant { cap: *cap, most: most[i], run, fill, inflight, seq: 0 })));
        }
        out.retain_mut(|(conn, g)| {
            let p = self.procs.get_mut(conn).expect("live process");
            let prev = p.sent.map(|s| Grant { seq: g.seq, ..s });
            if prev == Some(*g) {
                return false;
            }
            g.seq = p.sent.map_or(p.first_seq, |s| s.seq.saturating_add(1));
            p.exposure = p.exposure.max(g.cap);
            p.sent = Some(*g);
            true
        });
        out
    }

    /// Logs, once per slot, why the tenant switched in (`live[i]`) has not started after
    /// ten slices: what it waits for and what every other tenant holds against its cap.
    fn log_long_switch(&mut self, live: &[TenantId], i: usize, caps: &[u64], now_cap: u64, usage: &HashMap<TenantId, ShimReport>) {
        let u = &usage[&live[i]];
        let others: Vec<String> = (0..live.len())
            .filter(|&j| j != i)
            .map(|j| {
                let v = &usage[&live[j]];
                let busy = if v.busy || v.waiting { "busy" } else { "idle" };
                format!("{} ({busy}) holds {} of {}", self.tenants.get(live[j]).name, format_size(v.held), format_size(caps[j]))
            })
            .collect();
        self.events.push(format!(
            "{} waits for its switch: holds {}, wants {}, a command needs {}, granted {} of {}; {}",
            self.tenants.get(live[i]).name,
            format_size(u.held),
            format_size(u.want),
            format_size(u.blocked),
            format_size(now_cap),
            format_size(caps[i]),
            others.join(", ")
        ));
        if let Some(r) = self.running.as_mut() {
            r.waited_logged = true;
        }
    }

    /// Everything fits (or strict priority): every unfrozen tenant runs, except below the
    /// highest class that has work. Memory goes by priority class.
    fn concurrent(&mut self, live: &[TenantId], usage: &HashMap<TenantId, ShimReport>) -> (HashMap<TenantId, bool>, HashMap<TenantId, u64>) {
        self.running = None;
        let ready = |t: &TenantId| (usage[t].busy || usage[t].waiting || usage[t].blocked > 0) && self.responsive(*t);
        let top = live.iter().filter(|t| ready(t) && !self.tenants.get(**t).limits.frozen).map(|t| self.tenants.get(*t).priority).max();
        let mut runs = HashMap::new();
        let mut order = HashMap::new();
        let max = live.iter().map(|u| self.tenants.get(*u).priority).max().unwrap_or(0);
        for t in live {
            let k = self.tenants.get(*t);
            let gated = self.settings.policy == Policy::Priority && top.is_some_and(|p| k.priority < p);
            runs.insert(*t, !k.limits.frozen && !gated);
            order.insert(*t, if k.limits.frozen || !self.responsive(*t) { u64::MAX } else { (i64::from(max) - i64::from(k.priority)).unsigned_abs() });
        }
        (runs, order)
    }

    /// Time slicing: the head of the scheduler's timeline runs; the timeline gives every
    /// tenant's next run, for the division of memory.
    fn sliced(&mut self, live: &[TenantId], usage: &HashMap<TenantId, ShimReport>, now: Nanos) -> (HashMap<TenantId, bool>, HashMap<TenantId, u64>) {
        let mut views: Vec<TenantView> = live
            .iter()
            .map(|t| {
                let k = self.tenants.get(*t);
                let u = &usage[t];
                let ready = u.busy || u.waiting || u.blocked > 0 || self.running.is_some_and(|r| r.tenant == *t);
                TenantView {
                    id: *t,
                    ready,
                    frozen: k.limits.frozen || !self.responsive(*t),
                    priority: k.priority,
                    weight: k.limits.weight,
                    timeslice: k.limits.timeslice,
                }
            })
            .collect();
        let cost = self.switch_cost(live);
        if let Some(r) = self.running.as_mut() {
            // Finished counts every command released before the switch once they are done,
            // so more than were released then means one released after it has finished.
            if usage.get(&r.tenant).is_some_and(|u| r.observe(u.finished, now)) {
                let u = &usage[&r.tenant];
                let base = self.tenants.get(r.tenant).limits.timeslice;
                let stretched = if let Some(cost) = cost.filter(|_| r.slice > base) {
                    format!("; its slice is stretched to {:.0} ms (a switch costs {:.1} ms)", r.slice as f64 / 1e6, cost as f64 / 1e6)
                } else {
                    String::new()
                };
                self.events.push(format!(
                    "{} started {:.1} ms after its switch (holds {}, wants {}){stretched}",
                    self.tenants.get(r.tenant).name,
                    (now - r.switched) as f64 / 1e6,
                    format_size(u.held),
                    format_size(u.want)
                ));
            }
        }
        let keep = self.running.filter(|r| now < r.ends() && views.iter().any(|v| v.id == r.tenant && !v.frozen));
        if let Some(r) = self.running.take_if(|_| keep.is_none()) {
            self.sched.charge(r.tenant, r.charge(now));
            let cost = r.switch_cost(now);
            let avg = self.switch_costs.entry(r.tenant).or_insert(cost);
            *avg = avg.midpoint(cost);
            let totals = usage.get(&r.tenant).unwrap_or(&r.before);
            let k = self.tenants.get(r.tenant);
            self.events.push(format!("{} {}", k.name, r.summary(totals, now)));
            let b = &r.before;
            let event = Event::SlotEnded {
                tenant: k.name.clone(),
                switch_ns: cost,
                ran_ns: now.saturating_sub(r.switched),
                commands: totals.commands.saturating_sub(b.commands),
                bytes_h2d: totals.bytes_h2d.saturating_sub(b.bytes_h2d),
                bytes_d2h: totals.bytes_d2h.saturating_sub(b.bytes_d2h),
            };
            self.notices.push(Notice { uid: k.owner, event });
        }
        let cost = self.switch_cost(live);
        for v in &mut views {
            v.timeslice = self.slice_of(v.id, cost);
        }
        if keep.is_none() {
            if let Some(head) = self.sched.timeline(&views, 1).head() {
                let u = &usage[&head.tenant];
                let timeslice = self.tenants.get(head.tenant).limits.timeslice;
                self.running = Some(Slot::switch_in(head.tenant, now, *u, head.slice, timeslice));
                let k = self.tenants.get_mut(head.tenant);
                k.stat.switches += 1;
                self.notices.push(Notice { uid: k.owner, event: Event::SwitchedIn { tenant: k.name.clone(), slice_ns: head.slice } });
            }
        }
        let timeline = self.sched.timeline(&views, 2 * live.len().max(1));
        let mut order: HashMap<TenantId, u64> = live.iter().map(|t| (*t, u64::MAX)).collect();
        let cur = self.running.map(|r| r.tenant);
        for (pos, slot) in cur.into_iter().chain(timeline.slots.iter().map(|s| s.tenant)).enumerate() {
            let o = order.get_mut(&slot).expect("live tenant");
            *o = (*o).min(pos as u64);
        }
        let runs = live.iter().map(|t| (*t, Some(*t) == cur)).collect();
        (runs, order)
    }

    /// Counts in `gmem.events` the conditions that began for the tenants `live`, given
    /// their `caps` and `claimed` (the caps before spare memory was shared out) of a
    /// budget `hbm`, and tells them to watchers.
    fn note_mem_events(&mut self, live: &[TenantId], caps: &[u64], claimed: &[u64], usage: &HashMap<TenantId, ShimReport>, hbm: Option<u64>) {
        let sum = |v: &[u64]| v.iter().fold(0u64, |a, c| a.saturating_add(*c));
        let budget = hbm.unwrap_or(u64::MAX);
        let (given, claims) = (sum(caps), sum(claimed));
        for ((t, cap), claim) in live.iter().zip(caps).zip(claimed) {
            let (u, k) = (&usage[t], self.tenants.get(*t));
            // What it may hold: a process reports every 20 ms, and may have grown to its
            // grant since its last report, but not past its allocations.
            let held = self.procs_of(*t).map(|(_, p)| p.may_occupy()).fold(0, u64::saturating_add);
            let sight = Sight {
                held,
                want: u.want,
                blocked: u.blocked,
                largest: u.largest,
                cap: *cap,
                low: k.limits.low,
                high: k.limits.high,
                budget_full: hbm.is_some() && given >= budget,
                others: claims - claim,
                budget,
            };
            let began = self.mem_events.entry(*t).or_default().note(&sight);
            for counter in began {
                self.notices.push(Notice { uid: k.owner, event: Event::Memory { tenant: k.name.clone(), counter } });
            }
        }
    }

    /// What a switch costs among the tenants `live` taking turns: the mean of each one's
    /// average over its slots. `None` before any slot has ended.
    fn switch_cost(&self, live: &[TenantId]) -> Option<Nanos> {
        let costs: Vec<Nanos> = live.iter().filter_map(|t| self.switch_costs.get(t).copied()).collect();
        (!costs.is_empty()).then(|| costs.iter().sum::<Nanos>() / costs.len() as Nanos)
    }

    /// The slice of tenant `t`: its `compute.timeslice`, stretched to amortize a switch that
    /// costs `cost` ([`slot::stretched`]). Every tenant taking turns is stretched by the
    /// same switch cost, so that a tenant whose memory stays in while others swap gets the
    /// same time as they do.
    /// A scheduling hook may change it, within 1 µs and the longer of the slice and
    /// `--max-timeslice`.
    fn slice_of(&mut self, t: TenantId, cost: Option<Nanos>) -> Nanos {
        let base = self.tenants.get(t).limits.timeslice;
        let slice = cost.map_or(base, |cost| slot::stretched(base, cost, self.settings.max_timeslice));
        self.sched_hooks.timeslice(t, slice, cost).clamp(1_000, slice.max(self.settings.max_timeslice).max(1_000))
    }

    /// `cap` bytes of tenant `t` split among its processes in proportion to what they want.
    fn split(&self, t: TenantId, cap: u64) -> Vec<(u64, u64)> {
        let procs: Vec<(u64, u64)> = self.procs_of(t).map(|(c, p)| (c, p.report.want.max(p.report.blocked))).collect();
        let total = procs.iter().map(|(_, w)| *w).fold(0, u64::saturating_add);
        let n = procs.len() as u64;
        let mut left = cap;
        procs
            .iter()
            .enumerate()
            .map(|(i, (c, w))| {
                let share = if i as u64 + 1 == n {
                    left
                } else if total == 0 {
                    cap / n / CHUNK_BYTES * CHUNK_BYTES
                } else {
                    ((cap as u128 * *w as u128 / total as u128) as u64) / CHUNK_BYTES * CHUNK_BYTES
                };
                left -= share.min(left);
                (*c, share)
            })
            .collect()
    }
}
