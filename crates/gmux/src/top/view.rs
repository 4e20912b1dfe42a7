//! What `gmux top` shows, from two snapshots of the daemon: each tenant's rates over the
//! refresh, the header's totals, the sort order and the plain line.

use gmux_core::size::format_size;
use gmuxd::status::{State, Status, TenantStatus};

/// One tenant's row: its snapshot, and its rates since the previous one (`None` on the
/// first refresh that sees it).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The tenant now.
    pub now: TenantStatus,
    /// Bytes copied host to device per second.
    pub in_rate: Option<f64>,
    /// Bytes copied device to host per second.
    pub out_rate: Option<f64>,
    /// Commands released per second.
    pub cmd_rate: Option<f64>,
    /// Share of the refresh in which a process of it waited for memory (0 to 1), from
    /// its `gmem.pressure` total.
    pub wait_share: Option<f64>,
}

/// The column rows are sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Name, ascending.
    Name,
    /// GPU memory held, largest first.
    Gmem,
    /// Bytes in per second, largest first.
    In,
    /// Bytes out per second, largest first.
    Out,
    /// Commands per second, largest first.
    Commands,
}

impl SortKey {
    /// The next key, as the `s` key cycles them.
    pub fn next(self) -> SortKey {
        match self {
            SortKey::Name => SortKey::Gmem,
            SortKey::Gmem => SortKey::In,
            SortKey::In => SortKey::Out,
            SortKey::Out => SortKey::Commands,
            SortKey::Commands => SortKey::Name,
        }
    }

    /// Its name in the footer.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Gmem => "gmem",
            SortKey::In => "in/s",
            SortKey::Out => "out/s",
            SortKey::Commands => "cmd/s",
        }
    }
}

/// A refresh: the snapshot and its rows, sorted by `key`.
#[derive(Debug, Clone)]
pub struct View {
    /// The daemon now.
    pub status: Status,
    /// Its tenants with their rates.
    pub rows: Vec<Row>,
}

impl View {
    /// The view of `now`, `dt` seconds after `prev`.
    pub fn new(prev: Option<&Status>, now: Status, dt: f64, key: SortKey) -> View {
        let rate = |a: u64, b: Option<u64>| b.filter(|_| dt > 0.0).map(|b| a.saturating_sub(b) as f64 / dt);
        let mut rows: Vec<Row> = now
            .tenants
            .iter()
            .map(|t| {
                let before = prev.and_then(|p| p.tenants.iter().find(|b| b.name == t.name));
                Row {
                    now: t.clone(),
                    in_rate: rate(t.bytes_h2d, before.map(|b| b.bytes_h2d)),
                    out_rate: rate(t.bytes_d2h, before.map(|b| b.bytes_d2h)),
                    cmd_rate: rate(t.commands, before.map(|b| b.commands)),
                    wait_share: rate(t.pressure.some.total_ns, before.map(|b| b.pressure.some.total_ns)).map(|ns| (ns / 1e9).min(1.0)),
                }
            })
            .collect();
        sort(&mut rows, key);
        View { status: now, rows }
    }

    /// Bytes per second over the link, in and out, for all tenants together.
    pub fn link(&self) -> (f64, f64) {
        self.rows.iter().fold((0.0, 0.0), |(i, o), r| (i + r.in_rate.unwrap_or(0.0), o + r.out_rate.unwrap_or(0.0)))
    }

    /// The header: budget, what is held, the host tier, the link and the slice owner.
    pub fn header(&self) -> String {
        let s = &self.status;
        let (i, o) = self.link();
        format!(
            "budget {}  held {}{}  swapped {} of host {}  link in {} out {}  slice {}  policy {}/{}",
            s.budget.map_or("device".into(), format_size),
            format_size(s.held),
            s.peak_held.map_or(String::new(), |p| format!(" (peak {})", format_size(p))),
            format_size(s.swapped),
            s.host.map_or("unlimited".into(), format_size),
            per_second(Some(i)),
            per_second(Some(o)),
            s.slice_owner.as_deref().unwrap_or("-"),
            s.policy,
            s.switch.name()
        )
    }

    /// The whole refresh as one line, for a pipe or a file.
    pub fn plain(&self) -> String {
        let tenants: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let t = &r.now;
                format!(
                    "{} {} gmem {} want {} swap {} in {} out {} cmd {} switches {} wait {} pressure {:.0}%",
                    t.name,
                    t.state.name(),
                    format_size(t.held),
                    format_size(t.want),
                    format_size(t.swapped),
                    per_second(r.in_rate),
                    per_second(r.out_rate),
                    count_rate(r.cmd_rate),
                    t.switches,
                    share(r.wait_share),
                    t.pressure.some.avg10 * 100.0
                )
            })
            .collect();
        format!("{}; {}", self.header(), if tenants.is_empty() { "no tenants".into() } else { tenants.join(" | ") })
    }

    /// The table's cells: a header row, then one row per tenant.
    pub fn cells(&self) -> Vec<Vec<String>> {
        let head = ["TENANT", "STATE", "PRIO", "GMEM", "WANT", "SWAP", "LOW", "HIGH", "IN/s", "OUT/s", "CMD/s", "SWITCHES", "WAIT", "PSI10"];
        let mut out = vec![head.map(String::from).to_vec()];
        for r in &self.rows {
            let t = &r.now;
            out.push(vec![
                t.name.clone(),
                t.state.name().into(),
                t.priority.to_string(),
                format_size(t.held),
                format_size(t.want),
                format_size(t.swapped),
                format_size(t.limit_low),
                t.limit_high.map_or("max".into(), format_size),
                per_second(r.in_rate),
                per_second(r.out_rate),
                count_rate(r.cmd_rate),
                t.switches.to_string(),
                share(r.wait_share),
                format!("{:.0}%", t.pressure.some.avg10 * 100.0),
            ]);
        }
        out
    }

    /// Sorts the rows by `key`.
    pub fn sort(&mut self, key: SortKey) {
        sort(&mut self.rows, key);
    }

    /// Whether tenant `name` is frozen now.
    pub fn frozen(&self, name: &str) -> bool {
        self.rows.iter().any(|r| r.now.name == name && r.now.state == State::Frozen)
    }
}

fn sort(rows: &mut [Row], key: SortKey) {
    let by = |r: &Row| match key {
        SortKey::Name => 0.0,
        SortKey::Gmem => r.now.held as f64,
        SortKey::In => r.in_rate.unwrap_or(0.0),
        SortKey::Out => r.out_rate.unwrap_or(0.0),
        SortKey::Commands => r.cmd_rate.unwrap_or(0.0),
    };
    rows.sort_by(|a, b| by(b).total_cmp(&by(a)).then_with(|| a.now.name.cmp(&b.now.name)));
}

fn per_second(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{}/s", format_size(v.round() as u64)))
}

fn count_rate(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}

fn share(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_core::arbiter::Switch;
    use gmux_core::pressure::{Averages, Pressure};

    fn tenant(name: &str, held: u64, h2d: u64, commands: u64, held_ns: u64) -> TenantStatus {
        TenantStatus {
            id: 0,
            name: name.into(),
            uid: None,
            pids: vec![1],
            priority: 0,
            state: State::Running,
            held,
            resident: held,
            want: held,
            swapped: 0,
            limit_high: None,
            limit_low: 0,
            commands,
            finished: commands,
            bytes_h2d: h2d,
            bytes_d2h: h2d / 2,
            switches: 3,
            launches_held_ns: 0,
            pressure: Pressure { some: Averages { avg10: 0.5, total_ns: held_ns, ..Default::default() }, ..Default::default() },
            gmem_events: Default::default(),
            jobs: None,
        }
    }

    fn status(tenants: Vec<TenantStatus>) -> Status {
        Status {
            gpu: None,
            budget: Some(1 << 30),
            host: None,
            policy: "rr".into(),
            switch: Switch::Msched,
            held: 0,
            peak_held: Some(0),
            swapped: 0,
            slice_owner: Some("a".into()),
            tenants,
        }
    }

    #[test]
    fn rates_are_the_counters_growth_over_the_refresh() {
        let before = status(vec![tenant("a", 1 << 20, 0, 100, 0), tenant("b", 8 << 20, 0, 0, 0)]);
        let now = status(vec![tenant("a", 1 << 20, 4 << 20, 300, 500_000_000), tenant("b", 8 << 20, 2 << 20, 0, 0), tenant("c", 0, 9, 9, 0)]);
        let v = View::new(Some(&before), now, 2.0, SortKey::In);
        let names: Vec<&str> = v.rows.iter().map(|r| r.now.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"], "sorted by bytes in per second; c is new and has none yet");
        let a = &v.rows[0];
        assert_eq!((a.in_rate, a.out_rate, a.cmd_rate, a.wait_share), (Some(2097152.0), Some(1048576.0), Some(100.0), Some(0.25)));
        assert_eq!(v.rows[2].in_rate, None);
        assert_eq!(v.link(), (3.0 * 1048576.0, 1.5 * 1048576.0));
        assert_eq!(v.cells()[1][8..14], ["2.0 MiB/s", "1.0 MiB/s", "100", "3", "25%", "50%"]);
        assert!(
            v.plain().contains("a running gmem 1.0 MiB want 1.0 MiB swap 0 B in 2.0 MiB/s out 1.0 MiB/s cmd 100 switches 3 wait 25% pressure 50% | b"),
            "{}",
            v.plain()
        );
        assert!(v.header().contains("link in 3.0 MiB/s out 1.5 MiB/s  slice a  policy rr/msched"), "{}", v.header());
    }

    #[test]
    fn each_key_sorts_its_column_and_the_first_refresh_shows_no_rates() {
        let now = status(vec![tenant("b", 1 << 20, 5, 5, 0), tenant("a", 8 << 20, 9, 9, 0)]);
        let v = View::new(None, now.clone(), 1.0, SortKey::Gmem);
        assert_eq!(v.rows.iter().map(|r| r.now.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(v.rows.iter().all(|r| r.in_rate.is_none() && r.cmd_rate.is_none()));
        assert_eq!(v.cells()[1][8], "-");
        let v = View::new(None, now, 1.0, SortKey::Name);
        assert_eq!(v.rows[0].now.name, "a");
        let mut k = SortKey::Name;
        for _ in 0..5 {
            k = k.next();
        }
        assert_eq!(k, SortKey::Name, "s cycles through the five keys");
    }
}
