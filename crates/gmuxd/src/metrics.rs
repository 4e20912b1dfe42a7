//! `gmux daemon --metrics ADDR`: the daemon's [`Status`] and its switch times in the
//! Prometheus text format, served over HTTP at `/metrics`. Whoever reaches ADDR reads
//! every tenant's name and counters, as with any exporter: keep it on loopback or behind
//! a firewall.

use super::server::lock;
use super::server::Shared;
use super::status::{status, State, Status, TenantStatus};
use crate::Failure;
use gmux_core::arbiter::event::{Event, Notice};
use gmux_core::arbiter::mem_events::MemEvent;
use prometheus_client::encoding::{prometheus_text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

/// The port `--metrics` serves on when given without one.
pub const DEFAULT_PORT: u16 = 9400;

/// Longest request head read, and most scrapes served at once: a client cannot hold the
/// daemon's memory or descriptors.
const MAX_REQUEST: usize = 8 << 10;
const MAX_SCRAPES: usize = 16;
/// A client that has not sent its request, or read the answer, by then is dropped.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The labels of a tenant's series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// The tenant's name.
    pub tenant: String,
    /// The daemon's GPU: its socket's name without the extension (gpu0 by default).
    pub gpu: String,
    /// The uid of the tenant's user (the daemon's owner for tenants it made).
    pub uid: u32,
}

/// A per-tenant series: its name after `gmux_`, its help, and its value for a tenant.
type Series<T> = (&'static str, &'static str, fn(&TenantStatus) -> T);

/// The labels of a tenant's stall time: the tenant's, and the kind (some or full).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StallLabels {
    #[prometheus(flatten)]
    tenant: TenantLabels,
    kind: &'static str,
}

/// The labels of a tenant's pressure: its stall's, and the window.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PressureLabels {
    #[prometheus(flatten)]
    stall: StallLabels,
    window: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    gpu: String,
}

/// What the daemon keeps between scrapes: the histogram of switch times per tenant.
pub struct Metrics {
    gpu: String,
    owner: u32,
    switch_seconds: Family<TenantLabels, Histogram>,
    /// The series of `switch_seconds`, so that those of tenants gone can be dropped.
    switched: Mutex<HashSet<TenantLabels>>,
}

impl Metrics {
    /// Metrics of the daemon of GPU `gpu`, run by uid `owner`.
    pub fn new(gpu: &str, owner: u32) -> Metrics {
        let switch_seconds = Family::new_with_constructor(switch_histogram as fn() -> Histogram);
        Metrics { gpu: gpu.into(), owner, switch_seconds, switched: Mutex::new(HashSet::new()) }
    }

    fn labels(&self, tenant: &str, uid: Option<u32>) -> TenantLabels {
        TenantLabels { tenant: tenant.into(), gpu: self.gpu.clone(), uid: uid.unwrap_or(self.owner) }
    }

    /// Takes an event: a slot's end adds its switch time to the histogram.
    pub(crate) fn observe(&self, n: &Notice) {
        if let Event::SlotEnded { tenant, switch_ns, .. } = &n.event {
            let labels = self.labels(tenant, n.uid);
            self.switch_seconds.get_or_create(&labels).observe(*switch_ns as f64 / 1e9);
            lock(&self.switched).insert(labels);
        }
    }

    /// The exposition of `s`: every series, in the Prometheus text format (0.0.4). The
    /// switch times of tenants no longer live are dropped.
    pub fn encode(&self, s: &Status) -> String {
        let live: HashSet<TenantLabels> = s.tenants.iter().map(|t| self.labels(&t.name, t.uid)).collect();
        lock(&self.switched).retain(|l| {
            let keep = live.contains(l);
            if !keep {
                self.switch_seconds.remove(l);
            }
            keep
        });
        let mut r = Registry::with_prefix("gmux");
        let gpu = GpuLabels { gpu: self.gpu.clone() };
        let daemon_gauge = |r: &mut Registry, name: &str, help: &str, v: Option<u64>| {
            let f = Family::<GpuLabels, Gauge<u64, AtomicU64>>::default();
            if let Some(v) = v {
                f.get_or_create(&gpu).set(v);
            }
            r.register(name, help, f);
        };
        daemon_gauge(&mut r, "budget_bytes", "GPU-memory budget shared by the tenants (absent: each process's free device memory)", s.budget);
        daemon_gauge(&mut r, "host_budget_bytes", "Host-tier budget for evicted memory (absent: unlimited)", s.host);
        daemon_gauge(&mut r, "held_bytes", "GPU memory all live tenants hold", Some(s.held));
        daemon_gauge(&mut r, "peak_held_bytes", "Most GPU memory all processes held at once since the daemon started", s.peak_held);
        daemon_gauge(&mut r, "swapped_bytes", "Memory all live tenants hold in host memory, evicted", Some(s.swapped));
        daemon_gauge(&mut r, "tenants", "Live tenants", Some(s.tenants.len() as u64));

        let gauges: [Series<Option<u64>>; 10] = [
            ("tenant_held_bytes", "GPU memory the tenant holds, mapped or spare (gmem.current)", |t| Some(t.held)),
            ("tenant_resident_bytes", "Bytes of the tenant's memory resident on the GPU", |t| Some(t.resident)),
            ("tenant_wanted_bytes", "Bytes the tenant's next slice is forecast to use", |t| Some(t.want)),
            ("tenant_swapped_bytes", "Bytes of the tenant's memory in host memory (gmem.swap.current)", |t| Some(t.swapped)),
            ("tenant_limit_high_bytes", "gmem.limit.high (absent: max)", |t| t.limit_high),
            ("tenant_limit_low_bytes", "gmem.limit.low", |t| Some(t.limit_low)),
            ("tenant_processes", "Processes of the tenant", |t| Some(t.pids.len() as u64)),
            ("tenant_running", "1 while the tenant's processes may release commands", |t| Some(u64::from(t.state == State::Running))),
            ("tenant_jobs_running", "Jobs the tenant's live processes marked begun and not ended (absent: none marks jobs)", |t| {
                t.jobs.as_ref().map(|j| j.running)
            }),
            ("tenant_jobs_done", "Jobs the tenant's live processes marked ended (absent: none marks jobs)", |t| t.jobs.as_ref().map(|j| j.done)),
        ];
        for (name, help, get) in gauges {
            let f = Family::<TenantLabels, Gauge<u64, AtomicU64>>::default();
            for t in &s.tenants {
                if let Some(v) = get(t) {
                    f.get_or_create(&self.labels(&t.name, t.uid)).set(v);
                }
            }
            r.register(name, help, f);
        }
        let counters: [Series<u64>; 5] = [
            ("tenant_commands", "Commands the tenant released (ggroup.stat commands)", |t| t.commands),
            ("tenant_finished_commands", "Commands of the tenant seen finished", |t| t.finished),
            ("tenant_h2d_bytes", "Bytes copied host to device for the tenant (ggroup.stat bytes_h2d)", |t| t.bytes_h2d),
            ("tenant_d2h_bytes", "Bytes copied device to host for the tenant, its evictions (ggroup.stat bytes_d2h)", |t| t.bytes_d2h),
            ("tenant_switches", "Times the tenant was switched in (ggroup.stat switches)", |t| t.switches),
        ];
        for (name, help, get) in counters {
            let f = Family::<TenantLabels, Counter>::default();
            for t in &s.tenants {
                f.get_or_create(&self.labels(&t.name, t.uid)).inc_by(get(t));
            }
            r.register(name, help, f);
        }
        let held = Family::<TenantLabels, Counter<f64, AtomicU64>>::default();
        for t in &s.tenants {
            held.get_or_create(&self.labels(&t.name, t.uid)).inc_by(t.launches_held_ns as f64 / 1e9);
        }
        r.register("tenant_launches_held_seconds", "Time the tenant's agent held its launches to map and fill memory", held);
        let ratio = Family::<PressureLabels, Gauge<f64, AtomicU64>>::default();
        let stalled = Family::<StallLabels, Counter<f64, AtomicU64>>::default();
        for t in &s.tenants {
            for (kind, a) in [("some", &t.pressure.some), ("full", &t.pressure.full)] {
                let stall = StallLabels { tenant: self.labels(&t.name, t.uid), kind };
                for (window, v) in [("10s", a.avg10), ("60s", a.avg60), ("300s", a.avg300)] {
                    ratio.get_or_create(&PressureLabels { stall: stall.clone(), window }).set(v);
                }
                stalled.get_or_create(&stall).inc_by(a.total_ns as f64 / 1e9);
            }
        }
        r.register(
            "tenant_memory_pressure_ratio",
            "gmem.pressure: share of the window its commands waited for GPU memory (some: one process, full: all)",
            ratio,
        );
        r.register("tenant_memory_stalled_seconds", "Time its commands waited for GPU memory (some: one process, full: all)", stalled);
        let events = Family::<StallLabels, Counter>::default();
        for t in &s.tenants {
            for e in MemEvent::ALL {
                events.get_or_create(&StallLabels { tenant: self.labels(&t.name, t.uid), kind: e.name() }).inc_by(t.gmem_events.get(e));
            }
        }
        r.register("tenant_memory_events", "gmem.events: times a memory boundary was met, by kind (low, high, max, oom, swap)", events);
        r.register(
            "tenant_switch_seconds",
            "Time from a switch to the tenant until the memory it was given had arrived, per slot",
            self.switch_seconds.clone(),
        );
        let mut text = String::new();
        prometheus_text::encode(&mut text, &r).expect("writing to a String does not fail");
        text
    }
}

/// Buckets of switch times: 1 ms to about 16 s.
fn switch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Parses `--metrics`'s value: HOST:PORT, or HOST alone for port 9400.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let fix = "write HOST:PORT or HOST, e.g. 127.0.0.1:9400";
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let host = s.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(s);
    host.parse::<std::net::IpAddr>().map(|ip| SocketAddr::new(ip, DEFAULT_PORT)).map_err(|_| format!("--metrics {s}: not an address; {fix}"))
}

/// Binds `addr` for [`serve`], so that a port in use fails the daemon's start.
pub fn bind(addr: SocketAddr) -> Result<TcpListener, Failure> {
    let l = TcpListener::bind(addr).map_err(|e| Failure::Runtime(format!("cannot serve metrics on {addr} ({e}); pick another with --metrics HOST:PORT")))?;
    l.set_nonblocking(true).map_err(|e| Failure::Runtime(e.to_string()))?;
    Ok(l)
}

/// Serves `/metrics` on `listener` until the daemon ends.
pub(crate) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let Ok((conn, _)) = listener.accept().await else { continue };
        // Past the limit, a new scrape is closed at once rather than queued.
        let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT, answer(conn, &shared)).await;
            drop(permit);
        });
    }
}

async fn answer(mut conn: tokio::net::TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // The head ends at an empty line (CRLF, or a bare LF from a lenient client).
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        if head.len() > MAX_REQUEST {
            respond(&mut conn, "431 Request Header Fields Too Large", "text/plain", "request too large\n").await?;
            // What the client still sends is read and dropped (within the scrape's time):
            // closing with it unread would reset the connection and lose the answer.
            while conn.read(&mut buf).await? > 0 {}
            return Ok(());
        }
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => {
            let Some(metrics) = shared.metrics.as_ref() else { return Ok(()) };
            let s = status(&shared.lock(), &|_| true, true, &|t| shared.channels.jobs(t));
            respond(&mut conn, "200 OK", prometheus_text::CONTENT_TYPE, &metrics.encode(&s)).await
        }
        (b"GET", _) => respond(&mut conn, "404 Not Found", "text/plain", "gmuxd serves only /metrics\n").await,
        _ => respond(&mut conn, "405 Method Not Allowed", "text/plain", "only GET /metrics\n").await,
    }
}

async fn respond(conn: &mut tokio::net::TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use gmux_core::arbiter::Switch;

    fn one_tenant() -> Status {
        let t = TenantStatus {
            id: 0,
            name: "llm \"a\"".into(),
            uid: None,
            pids: vec![7, 8],
            priority: 0,
            state: State::Running,
            held: 3 << 30,
            resident: 2 << 30,
            want: 1 << 30,
            swapped: 5,
            limit_high: None,
            limit_low: 0,
            commands: 1234,
            finished: 1200,
            bytes_h2d: u64::MAX,
            bytes_d2h: 6,
            switches: 9,
            launches_held_ns: 1_500_000_000,
            gmem_events: gmux_core::arbiter::mem_events::MemEvents { high: 4, ..Default::default() },
            jobs: None,
            pressure: gmux_core::pressure::Pressure {
                some: gmux_core::pressure::Averages { avg10: 0.25, total_ns: 2_500_000_000, ..Default::default() },
                ..Default::default()
            },
        };
        Status {
            gpu: None,
            budget: Some(16 << 30),
            host: None,
            policy: "rr".into(),
            switch: Switch::Msched,
            held: 3 << 30,
            peak_held: Some(4 << 30),
            swapped: 5,
            slice_owner: None,
            tenants: vec![t],
        }
    }

    #[test]
    fn the_exposition_names_each_series_with_its_unit_and_labels() {
        let m = Metrics::new("gpu1", 1000);
        let text = m.encode(&one_tenant());
        let l = r#"{tenant="llm \"a\"",gpu="gpu1",uid="1000"}"#;
        for want in [
            "# TYPE gmux_budget_bytes gauge".to_string(),
            r#"gmux_budget_bytes{gpu="gpu1"} 17179869184"#.into(),
            format!("gmux_tenant_held_bytes{l} 3221225472"),
            format!("gmux_tenant_processes{l} 2"),
            format!("gmux_tenant_running{l} 1"),
            "# TYPE gmux_tenant_commands_total counter".into(),
            format!("gmux_tenant_commands_total{l} 1234"),
            format!("gmux_tenant_h2d_bytes_total{l} 18446744073709551615"),
            format!("gmux_tenant_launches_held_seconds_total{l} 1.5"),
            format!("{}kind=\"high\"}} 4", r#"gmux_tenant_memory_events_total{tenant="llm \"a\"",gpu="gpu1",uid="1000","#),
            format!("{}kind=\"some\",window=\"10s\"}} 0.25", r#"gmux_tenant_memory_pressure_ratio{tenant="llm \"a\"",gpu="gpu1",uid="1000","#),
            format!("{}kind=\"some\"}} 2.5", r#"gmux_tenant_memory_stalled_seconds_total{tenant="llm \"a\"",gpu="gpu1",uid="1000","#),
        ] {
            assert!(text.lines().any(|x| x == want), "no line {want:?} in\n{text}");
        }
        assert!(!text.contains("host_budget_bytes{") && !text.contains("limit_high_bytes{"), "unset limits have no series\n{text}");
    }

    #[test]
    fn switch_times_land_in_their_tenants_histogram() {
        let m = Metrics::new("gpu0", 0);
        for switch_ns in [500_000_000, 2_000_000_000] {
            let event = Event::SlotEnded { tenant: "a".into(), switch_ns, ran_ns: switch_ns, commands: 1, bytes_h2d: 0, bytes_d2h: 0 };
            m.observe(&Notice { uid: Some(7), event });
        }
        m.observe(&Notice { uid: Some(7), event: Event::SwitchedIn { tenant: "a".into(), slice_ns: 1 } });
        let mut s = one_tenant();
        s.tenants[0].name = "a".into();
        s.tenants[0].uid = Some(7);
        let text = m.encode(&s);
        let l = r#"tenant="a",gpu="gpu0",uid="7""#;
        for want in [
            format!("gmux_tenant_switch_seconds_count{{{l}}} 2"),
            format!("gmux_tenant_switch_seconds_sum{{{l}}} 2.5"),
            format!("gmux_tenant_switch_seconds_bucket{{{l},le=\"0.256\"}} 0"),
            format!("gmux_tenant_switch_seconds_bucket{{{l},le=\"0.512\"}} 1"),
            format!("gmux_tenant_switch_seconds_bucket{{{l},le=\"2.048\"}} 2"),
        ] {
            assert!(text.lines().any(|x| x == want), "no line {want:?} in\n{text}");
        }
        let gone = m.encode(&one_tenant());
        assert!(!gone.contains("tenant=\"a\""), "a tenant no longer live keeps no series:\n{gone}");
    }

    #[test]
    fn an_address_without_a_port_gets_9400() {
        assert_eq!(parse_addr("127.0.0.1").unwrap(), "127.0.0.1:9400".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0:9500").unwrap(), "0.0.0.0:9500".parse().unwrap());
        assert_eq!(parse_addr("[::1]").unwrap(), "[::1]:9400".parse().unwrap());
        let e = parse_addr("localhost:x").unwrap_err();
        assert!(e.contains("HOST:PORT"), "{e}");
    }
}
