//! `gmux bench launch`: what gmux adds to a kernel launch. The same loop of launches runs
//! natively and under `gmux run --standalone`, alternating, in child processes of this
//! executable (`gmux bench launch-loop`), which call the driver as any program does
//! (`dlopen("libcuda.so.1")`), so that under gmux every call goes through `libgmux.so`.
//! Two kernels, from PTX text loaded at run time: `empty` takes no arguments (gmux has
//! nothing to make resident), `buffer` takes a pointer to a 2 MiB allocation (resident
//! after the first launch: the path of a launch whose memory is already there).
//!
//! Two measures of the added cost: across processes (gmux's child against the native
//! one in the same round, both launching from one pinned CPU), and within gmux's child
//! (its launches through gmux against launches through the driver's own entry point,
//! block by block; see [`super::launch_loop`]). The second is free of what differs from
//! one process to the next; the native child's figure of the same shows its noise.
//!
//! With `--dispatch POLICY`, gmux's child is a tenant of a daemon of the benchmark's own
//! with that dispatch policy, and marks one job around its loops, so that every launch
//! looks at the dispatcher's word as a serving application's does.

use super::launch_loop::{median, Measured, KERNELS};
use crate::Failure;
use std::path::PathBuf;
use std::process::Command;

/// Options of `gmux bench launch`.
#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// Launches per kernel and entry point in each child (a multiple of 20: in 20 blocks).
    #[arg(long, default_value_t = 200_000)]
    pub launches: u64,
    /// Rounds: each measures native, then gmux.
    #[arg(long, default_value_t = 7)]
    pub rounds: u32,
    /// The CPU both children run on (default: the last one this process may use).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// `--mem-limit` of the gmux runs.
    #[arg(long, default_value = "8G")]
    pub mem_limit: String,
    /// Folder for the JSON results.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
    /// A policy object whose memory programs gmux's child runs (`GMUX_POLICY`): what its
    /// hooks add to a launch.
    #[arg(long, value_name = "FILE.o")]
    pub policy: Option<PathBuf>,
    /// Run gmux's child as a tenant of a daemon with `--dispatch POLICY` (e.g.
    /// srpt-deficit), marking one job around its loops: what looking at the dispatcher's
    /// word adds to a launch.
    #[arg(long, value_name = "POLICY")]
    pub dispatch: Option<String>,
}

/// Runs the benchmark: prints a table and writes `launch.json` under `--out`.
pub fn run(a: &LaunchArgs) -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::Runtime(format!("cannot locate the gmux executable: {e}")))?;
    std::fs::create_dir_all(&a.out).map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", a.out.display())))?;
    let cpu = a.cpu.or_else(last_cpu);
    let daemon = match &a.dispatch {
        Some(p) => {
            let socket = std::env::temp_dir().join(format!("gmux-bench-launch-{}.sock", std::process::id()));
            Some(super::lab::start_daemon(&exe, &["--dispatch".into(), p.clone()], socket, &a.out.join("launch.daemon.log"))?)
        }
        None => None,
    };
    let child = |gmux: bool| {
        let mut c = Command::new(&exe);
        if gmux {
            match &daemon {
                Some(d) => c.env("GMUX_SOCKET", &d.socket).args(["run", "--tenant", "bench-launch", "--mem-limit", &a.mem_limit, "--"]),
                None => c.args(["run", "--standalone", "--mem-limit", &a.mem_limit, "--"]),
            };
            c.arg(&exe);
            if let Some(p) = &a.policy {
                c.env("GMUX_POLICY", p);
            }
        }
        c.args(["bench", "launch-loop", "--launches", &a.launches.to_string()]);
        if gmux && daemon.is_some() {
            c.arg("--mark-job");
        }
        if let Some(cpu) = cpu {
            c.args(["--cpu", &cpu.to_string()]);
        }
        c
    };
    let mut runs: Vec<(&str, u32, Measured)> = Vec::new();
    for round in 1..=a.rounds {
        for (who, gmux) in [("native", false), ("gmux", true)] {
            let out = child(gmux).output().map_err(|e| Failure::Runtime(format!("cannot run the {who} launch loop: {e}")))?;
            if !out.status.success() {
                return Err(Failure::Runtime(format!(
                    "the {who} launch loop failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no message")
                )));
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let m: Measured = serde_json::from_str(line).map_err(|e| Failure::Runtime(format!("the {who} launch loop printed {line:?}: {e}")))?;
                eprintln!("round {round}/{}: {who:<6} {:<6} {:.3} µs per launch", a.rounds, m.kernel, m.us_per_launch);
                runs.push((who, round, m));
            }
        }
    }
    let pick = |who: &str, kernel: &str, f: fn(&Measured) -> f64| -> Vec<f64> {
        runs.iter().filter(|(w, _, m)| *w == who && m.kernel == kernel).map(|(_, _, m)| f(m)).collect()
    };
    let range = |v: &[f64]| format!("{:.3} to {:.3}", v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let device = runs.first().map_or(String::new(), |(_, _, m)| m.device.clone());
    let pinned = cpu.map_or("not pinned".to_string(), |c| format!("launching from CPU {c}"));
    let mut policy = a.policy.as_ref().map_or(String::new(), |p| format!(", gmux's child running policy {}", p.display()));
    if let Some(d) = &a.dispatch {
        policy += &format!(", gmux's child a tenant of a daemon with --dispatch {d}, marking a job");
    }
    println!("{} launches per kernel and entry point, {} rounds (native, then gmux), {pinned}, {device}{policy}", a.launches, a.rounds);
    println!(
        "{:<7} {:>10} {:>9} {:>15} {:>16} {:>17} {:>12}",
        "kernel", "native µs", "gmux µs", "added, across", "added, within", "within: range", "native floor"
    );
    let mut rows = Vec::new();
    for k in KERNELS {
        let (native, gmux) = (pick("native", k, |m| m.us_per_launch), pick("gmux", k, |m| m.us_per_launch));
        let across: Vec<f64> = gmux.iter().zip(&native).map(|(g, n)| g - n).collect();
        let (within, floor) = (pick("gmux", k, |m| m.paired_added_us), pick("native", k, |m| m.paired_added_us));
        let (n, g, x, w, f) = (median(&native), median(&gmux), median(&across), median(&within), median(&floor));
        println!("{k:<7} {n:>10.3} {g:>9.3} {x:>15.3} {w:>16.3} {:>17} {f:>12.3}", range(&within));
        rows.push(serde_json::json!({
            "kernel": k, "native_us": n, "gmux_us": g, "added_across_us": x, "added_us": w,
            "added_min_us": within.iter().copied().fold(f64::INFINITY, f64::min), "added_max_us": within.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            "native_floor_us": f,
        }));
    }
    println!("added, within: gmux's child, launches through gmux minus through the driver's own entry point (median of rounds)");
    let all: Vec<serde_json::Value> = runs.iter().map(|(w, r, m)| serde_json::json!({ "who": w, "round": r, "run": m })).collect();
    let json = serde_json::json!({
        "benchmark": "launch", "device": device, "launches": a.launches, "rounds": a.rounds, "cpu": cpu, "mem_limit": a.mem_limit, "policy": a.policy, "dispatch": a.dispatch,
        "rows": rows, "runs": all,
    });
    let path = a.out.join("launch.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("serializable"))
        .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
    println!("results: {}", path.display());
    Ok(())
}

/// The highest-numbered CPU this process may run on.
fn last_cpu() -> Option<usize> {
    // SAFETY: a zeroed `cpu_set_t` is a valid empty set, and the call writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: `set` was filled by the kernel; `CPU_ISSET` reads within it for every index
    // below `CPU_SETSIZE`.
    (0..libc::CPU_SETSIZE as usize).rev().find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
}
