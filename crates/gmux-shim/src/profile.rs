//! `GMUX_DEBUG=profile`: where the time of each handled entry point goes, for finding
//! what gmux costs a real program. Per entry point: calls, the time inside gmux's
//! wrapper in all, and the part of it inside the driver's own call; printed at exit,
//! largest own time first. Off, each call pays one check of a loaded flag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One entry point's counters, a static of its wrapper.
pub struct Entry {
    name: &'static str,
    calls: AtomicU64,
    total_ns: AtomicU64,
    driver_ns: AtomicU64,
    listed: AtomicBool,
}

/// Clock reads timed for the table's note of what profiling itself costs.
const CLOCK_READS: u32 = 10_000;

/// Every entry point called at least once while profiling.
static LISTED: Mutex<Vec<&'static Entry>> = Mutex::new(Vec::new());

impl Entry {
    /// Counters of the entry point `name`, all zero.
    pub const fn new(name: &'static str) -> Self {
        Entry { name, calls: AtomicU64::new(0), total_ns: AtomicU64::new(0), driver_ns: AtomicU64::new(0), listed: AtomicBool::new(false) }
    }

    /// Adds one call that began at `since`, `driver_ns` of it in the driver.
    pub fn add(&'static self, since: Instant, driver_ns: u64) {
        self.count(u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX), driver_ns);
    }

    /// Adds one span of `ns` measured by the caller, none of it in the driver.
    pub fn add_ns(&'static self, ns: u64) {
        self.count(ns, 0);
    }

    fn count(&'static self, total: u64, driver_ns: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(total, Ordering::Relaxed);
        self.driver_ns.fetch_add(driver_ns, Ordering::Relaxed);
        if !self.listed.swap(true, Ordering::Relaxed) {
            LISTED.lock().unwrap_or_else(|p| p.into_inner()).push(self);
        }
    }
}

/// Whether entry points are profiled.
pub fn on() -> bool {
    crate::config::config().debug.profile
}

/// Times a call of the driver for [`Entry::add`]: adds its duration to `driver_ns`.
pub fn driver<T>(driver_ns: &std::cell::Cell<u64>, call: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = call();
    driver_ns.set(driver_ns.get().saturating_add(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)));
    r
}

/// Times the phases of one call, each added to its own [`Entry`] (named "(call:phase)"),
/// so that the table shows where an entry point's time goes; does nothing unless
/// profiling.
pub struct Laps(Option<Instant>);

impl Laps {
    /// Starts timing now, when profiling.
    pub fn start() -> Self {
        Laps(on().then(Instant::now))
    }

    /// Adds the time since the last lap (or the start) to `phase`.
    pub fn lap(&mut self, phase: &'static Entry) {
        self.lap_as(phase, false);
    }

    /// Adds the time since the last lap to `phase` as the driver's time (the phase is a
    /// call of the driver).
    pub fn lap_driver(&mut self, phase: &'static Entry) {
        self.lap_as(phase, true);
    }

    fn lap_as(&mut self, phase: &'static Entry, driver: bool) {
        if let Some(t) = self.0 {
            let now = Instant::now();
            let ns = u64::try_from(now.duration_since(t).as_nanos()).unwrap_or(u64::MAX);
            phase.count(ns, if driver { ns } else { 0 });
            self.0 = Some(now);
        }
    }
}

/// The profile's table, one line per entry point, largest own time (in gmux, outside the
/// driver) first; `None` when nothing was profiled.
pub fn table() -> Option<String> {
    let list = LISTED.lock().unwrap_or_else(|p| p.into_inner());
    if list.is_empty() {
        return None;
    }
    let mut rows: Vec<(u64, u64, u64, &str)> = list
        .iter()
        .map(|e| {
            let (calls, total, driver) = (e.calls.load(Ordering::Relaxed), e.total_ns.load(Ordering::Relaxed), e.driver_ns.load(Ordering::Relaxed));
            (total.saturating_sub(driver), calls, driver, e.name)
        })
        .collect();
    rows.sort_unstable_by(|a, b| b.cmp(a));
    let t = Instant::now();
    for _ in 0..CLOCK_READS {
        std::hint::black_box(Instant::now());
    }
    let clock_ns = t.elapsed().as_nanos() as f64 / f64::from(CLOCK_READS);
    let mut s = format!("profile: a clock read costs {clock_ns:.0} ns; a profiled call reads the clock 4 times, a phase once\n");
    s += &format!("profile: {:<36} {:>10} {:>12} {:>12} {:>12}\n", "entry point", "calls", "gmux ms", "gmux us/call", "driver ms");
    for (own, calls, driver, name) in rows {
        s += &format!(
            "profile: {name:<36} {calls:>10} {:>12.1} {:>12.2} {:>12.1}\n",
            own as f64 / 1e6,
            own as f64 / 1e3 / calls.max(1) as f64,
            driver as f64 / 1e6
        );
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Entry = Entry::new("cuA");
    static B: Entry = Entry::new("cuB");

    /// Own time is the wrapper's less the driver's, and the entry that cost gmux most
    /// comes first.
    #[test]
    fn the_table_puts_the_largest_own_time_first() {
        let long_ago = Instant::now() - std::time::Duration::from_millis(10);
        A.add(long_ago, 9_000_000);
        B.add(long_ago, 0);
        B.add(Instant::now(), 0);
        let t = table().expect("profiled");
        assert!(t.starts_with("profile: a clock read costs "), "{t}");
        let (a, b) = (t.find("cuA").expect("cuA listed"), t.find("cuB").expect("cuB listed"));
        assert!(b < a, "{t}");
        let line = t.lines().find(|l| l.contains("cuB")).expect("cuB line");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[2], "2", "{line}");
        assert!(cols[3].parse::<f64>().expect("ms") >= 10.0, "{line}");
        let line = t.lines().find(|l| l.contains("cuA")).expect("cuA line");
        let own: f64 = line.split_whitespace().nth(3).expect("ms").parse().expect("ms");
        assert!((1.0..9.0).contains(&own), "10 ms in the wrapper, 9 of it in the driver: {line}");
    }
}
