//! The trace format: one JSON object per line, one line per allocation, command or free.
//! It is what `gmux record` will write from a real run; see docs/trace-format.md.

use crate::workload::{Access, AllocSpec, Command, Source};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    /// Format header; must be the first line.
    Header { version: u32, chunk_bytes: u64 },
    /// An allocation; `id` is unique per tenant.
    Alloc {
        tenant: String,
        id: u32,
        bytes: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        on_disk: bool,
    },
    /// A command as the device ran it.
    Cmd {
        tenant: String,
        stream: u32,
        /// `kernel`, `memcpy`, `memset`, `graph`, `host_fn`, `event`.
        kind: String,
        /// Kernel name, where known.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        name: String,
        /// Time on the device, µs.
        dur_us: f64,
        /// Ranges touched.
        ws: Vec<Range>,
        /// Last command of a task or request.
        #[serde(default, skip_serializing_if = "is_false")]
        task_end: bool,
        /// When the request it starts arrived, µs from the start of the trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arrival_us: Option<f64>,
    },
    /// An allocation was freed.
    Free { tenant: String, id: u32 },
    /// The program marked a point: `window` (its measured window opens here: it called
    /// `cuProfilerStart`). A steady replay starts after the last one.
    Mark { tenant: String, what: String },
}

fn is_false(b: &bool) -> bool {
    !b
}

/// A byte range of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Range {
    /// Allocation id.
    pub alloc: u32,
    /// First byte.
    pub off: u64,
    /// Length.
    pub len: u64,
    /// Written.
    #[serde(default, skip_serializing_if = "is_false")]
    pub w: bool,
}

/// Current format version.
pub const VERSION: u32 = 1;

/// One tenant's part of a trace, with allocation ids made dense.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantTrace {
    /// Allocations, dense.
    pub allocs: Vec<AllocSpec>,
    /// Commands in order.
    pub cmds: Vec<Command>,
    /// Index of the first command after the last `window` mark, if any.
    pub window: Option<usize>,
}

/// Reads a trace and keeps one tenant (the only one when `tenant` is `None`).
pub fn load_tenant(path: &Path, tenant: Option<&str>) -> Result<TenantTrace, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open trace {}: {e}", path.display()))?;
    let mut names: Vec<String> = Vec::new();
    let mut recs = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(&line).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        if n == 0 {
            match rec {
                Record::Header { version: VERSION, .. } => continue,
                _ => return Err(format!("{}: first line must be {{\"t\":\"header\",\"version\":{VERSION},..}}", path.display())),
            }
        }
        if let Record::Alloc { tenant, .. } | Record::Cmd { tenant, .. } | Record::Free { tenant, .. } | Record::Mark { tenant, .. } = &rec {
            if !names.contains(tenant) {
                names.push(tenant.clone());
            }
        }
        recs.push(rec);
    }
    let want = match tenant {
        Some(t) if names.iter().any(|n| n == t) => t.to_string(),
        Some(t) => return Err(format!("trace {} has no tenant {t:?}; it has {names:?}", path.display())),
        None if names.len() == 1 => names[0].clone(),
        None => return Err(format!("trace {} has tenants {names:?}; pick one with tenant = \"...\"", path.display())),
    };
    to_tenant(recs, &want).map_err(|e| format!("{}: {e}", path.display()))
}

fn to_tenant(recs: Vec<Record>, want: &str) -> Result<TenantTrace, String> {
    let mut ids: HashMap<u32, usize> = HashMap::new();
    let mut out = TenantTrace { allocs: Vec::new(), cmds: Vec::new(), window: None };
    for rec in recs {
        match rec {
            Record::Alloc { tenant, id, bytes, on_disk } if tenant == want => {
                if ids.insert(id, out.allocs.len()).is_some() {
                    return Err(format!("allocation {id} of {want} defined twice"));
                }
                out.allocs.push(AllocSpec { bytes, on_disk });
            }
            Record::Cmd { tenant, dur_us, ws, task_end, arrival_us, .. } if tenant == want => {
                let ws = ws
                    .iter()
                    .map(|r| {
                        let a = *ids.get(&r.alloc).ok_or(format!("command touches unknown allocation {}", r.alloc))?;
                        Ok(Access { alloc: a, offset: r.off, len: r.len, write: r.w })
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                if !(dur_us.is_finite() && dur_us >= 0.0) {
                    return Err(format!("command with duration {dur_us} µs"));
                }
                out.cmds.push(Command { duration_ns: dur_us * 1e3, ws, task_end, arrival_ns: arrival_us.map(|a| a * 1e3) });
            }
            Record::Mark { tenant, what } if tenant == want && what == "window" => out.window = Some(out.cmds.len()),
            _ => {}
        }
    }
    if out.cmds.is_empty() {
        return Err(format!("tenant {want} has no commands"));
    }
    Ok(out)
}

/// Writes records as a trace (header first).
pub fn write(out: &mut dyn Write, recs: &[Record]) -> std::io::Result<()> {
    let header = Record::Header { version: VERSION, chunk_bytes: gmux_core::CHUNK_BYTES };
    for r in std::iter::once(&header).chain(recs) {
        serde_json::to_writer(&mut *out, r)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Replays one tenant's commands, once or in a loop.
pub struct Replay {
    trace: TenantTrace,
    at: usize,
    repeat: bool,
    /// Where a loop starts again.
    loop_start: usize,
    offset_ns: f64,
}

/// Which part of a trace a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Every command, from the first.
    Whole,
    /// The program's steady state: the commands after its last `window` mark (where its
    /// measured window opened), else after its first task end (its first
    /// synchronization, which ends its setup). A trace whose only task end is its last
    /// command has no setup to skip.
    Steady,
}

impl Replay {
    /// A replay of `part` of the trace with sizes scaled by `scale` (rounded up to whole
    /// bytes).
    pub fn new(mut trace: TenantTrace, scale: f64, repeat: bool, part: Part) -> Self {
        if scale != 1.0 {
            for a in &mut trace.allocs {
                a.bytes = (a.bytes as f64 * scale).ceil() as u64;
            }
            for c in &mut trace.cmds {
                for r in &mut c.ws {
                    r.offset = (r.offset as f64 * scale) as u64;
                    r.len = (r.len as f64 * scale).ceil() as u64;
                }
            }
        }
        let loop_start = match (part, trace.window, trace.cmds.iter().position(|c| c.task_end)) {
            (Part::Steady, Some(w), _) if w < trace.cmds.len() => w,
            (Part::Steady, None, Some(i)) if i + 1 < trace.cmds.len() => i + 1,
            _ => 0,
        };
        Replay { trace, at: loop_start, repeat, loop_start, offset_ns: 0.0 }
    }
}

impl Source for Replay {
    fn allocs(&self) -> Vec<AllocSpec> {
        self.trace.allocs.clone()
    }
    fn next(&mut self) -> Option<Command> {
        if self.at == self.trace.cmds.len() {
            if !self.repeat {
                return None;
            }
            self.at = self.loop_start;
            self.offset_ns += self.trace.cmds.iter().filter_map(|c| c.arrival_ns).fold(0.0, f64::max);
        }
        let mut c = self.trace.cmds[self.at].clone();
        c.arrival_ns = c.arrival_ns.map(|a| a + self.offset_ns);
        self.at += 1;
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let recs = vec![
            Record::Alloc { tenant: "a".into(), id: 7, bytes: 4 << 20, on_disk: false },
            Record::Alloc { tenant: "b".into(), id: 7, bytes: 2 << 20, on_disk: true },
            Record::Cmd {
                tenant: "a".into(),
                stream: 0,
                kind: "kernel".into(),
                name: "k".into(),
                dur_us: 12.5,
                ws: vec![Range { alloc: 7, off: 2 << 20, len: 1 << 20, w: true }],
                task_end: true,
                arrival_us: None,
            },
        ];
        let path = std::env::temp_dir().join(format!("gmux-trace-{}.jsonl", std::process::id()));
        write(&mut std::fs::File::create(&path).unwrap(), &recs).unwrap();
        let t = load_tenant(&path, Some("a")).unwrap();
        assert_eq!(t.allocs, vec![AllocSpec { bytes: 4 << 20, on_disk: false }]);
        assert_eq!(t.cmds.len(), 1);
        assert_eq!(t.cmds[0].duration_ns, 12_500.0);
        assert_eq!(t.cmds[0].ws[0], Access { alloc: 0, offset: 2 << 20, len: 1 << 20, write: true });
        let err = load_tenant(&path, None).unwrap_err();
        assert!(err.contains("pick one"), "{err}");
        let err = load_tenant(&path, Some("b")).unwrap_err();
        assert!(err.contains("no commands"), "{err}");
        std::fs::remove_file(path).ok();
    }

    #[test]
    fn a_steady_replay_skips_the_setup_and_loops_what_follows() {
        let cmd = |us: f64, task_end: bool| Command { duration_ns: us * 1e3, ws: Vec::new(), task_end, arrival_ns: None };
        let trace = TenantTrace { allocs: Vec::new(), cmds: vec![cmd(1.0, false), cmd(2.0, true), cmd(3.0, false), cmd(4.0, true)], window: None };
        let durations = |part, n| {
            let mut r = Replay::new(trace.clone(), 1.0, true, part);
            (0..n).map(|_| r.next().unwrap().duration_ns / 1e3).collect::<Vec<_>>()
        };
        assert_eq!(durations(Part::Steady, 5), vec![3.0, 4.0, 3.0, 4.0, 3.0]);
        assert_eq!(durations(Part::Whole, 5), vec![1.0, 2.0, 3.0, 4.0, 1.0]);
        let one_task = TenantTrace { allocs: Vec::new(), cmds: vec![cmd(1.0, false), cmd(2.0, true)], window: None };
        let mut r = Replay::new(one_task, 1.0, true, Part::Steady);
        let seen: Vec<f64> = (0..3).map(|_| r.next().unwrap().duration_ns / 1e3).collect();
        assert_eq!(seen, vec![1.0, 2.0, 1.0], "a trace of one task has no setup to skip");
    }

    #[test]
    fn a_steady_replay_starts_where_the_window_mark_is() {
        let path = std::env::temp_dir().join(format!("gmux-trace-mark-{}.jsonl", std::process::id()));
        let cmd =
            |us: u32, end: bool| format!("{{\"t\":\"cmd\",\"tenant\":\"a\",\"stream\":0,\"kind\":\"kernel\",\"dur_us\":{us},\"ws\":[],\"task_end\":{end}}}\n");
        let mark = "{\"t\":\"mark\",\"tenant\":\"a\",\"what\":\"window\"}\n";
        let text = format!(
            "{{\"t\":\"header\",\"version\":1,\"chunk_bytes\":2097152}}\n{}{}{}{mark}{}{}",
            cmd(1, true),
            cmd(2, true),
            cmd(3, false),
            cmd(4, false),
            cmd(5, true)
        );
        std::fs::write(&path, text).unwrap();
        let t = load_tenant(&path, None).unwrap();
        assert_eq!(t.window, Some(3));
        let mut r = Replay::new(t, 1.0, true, Part::Steady);
        let seen: Vec<f64> = (0..4).map(|_| r.next().unwrap().duration_ns / 1e3).collect();
        assert_eq!(seen, vec![4.0, 5.0, 4.0, 5.0], "setup and warm-up skipped, the window looped");
        std::fs::remove_file(path).ok();
    }
}
