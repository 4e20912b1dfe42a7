//! Talking to the daemons of several GPUs: a command that concerns every GPU asks each
//! daemon; one about a tenant asks the daemons that know it; `--gpu` picks one daemon.

use crate::Failure;
use gmuxd::ctl::{request, Request};
use std::path::PathBuf;

/// `--gpu` of the commands that talk to one daemon.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuArg {
    /// The GPU whose daemon to talk to: its index, or its UUID or the start of one
    /// (default: the only daemon, or with a tenant, every daemon that knows it).
    #[arg(long, value_name = "UUID|INDEX")]
    pub gpu: Option<String>,
}

/// The socket of the daemon of GPU `which`: among the daemons of the run directory, the
/// one whose UUID starts with `which`, or for an index, the GPU the driver numbers so.
pub fn of_gpu(which: &str) -> Result<PathBuf, Failure> {
    if which.parse::<i32>().is_ok() {
        let gpus = gmux_cuda::gpus::list().map_err(|why| Failure::Runtime(format!("--gpu {which}: cannot list the GPUs ({why}); name the GPU by its UUID")))?;
        let g = gmux_cuda::gpus::find(&gpus, which).map_err(|e| Failure::Usage(format!("--gpu {which}: {e}")))?;
        return Ok(gmuxd::gpu_socket(&g.uuid));
    }
    let all = gmuxd::daemon_sockets();
    let stem = |p: &PathBuf| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let hits: Vec<&PathBuf> = all.iter().filter(|p| stem(p).to_ascii_lowercase().starts_with(&which.to_ascii_lowercase())).collect();
    match hits[..] {
        [one] => Ok(one.clone()),
        _ => Err(Failure::Usage(format!(
            "--gpu {which}: {} of the daemons in {} ({}) serve a GPU whose UUID starts so; give more of one",
            if hits.is_empty() { "none".to_string() } else { hits.len().to_string() },
            gmuxd::run_dir().display(),
            all.iter().map(stem).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The one daemon of a command: `--gpu`'s, else [`gmuxd::socket_path`].
pub fn one(gpu: &GpuArg) -> Result<PathBuf, Failure> {
    match &gpu.gpu {
        Some(w) => of_gpu(w),
        None => gmuxd::socket_path(),
    }
}

/// Sends `req` to the daemon at `socket` and prints its answer.
fn control_at(socket: &std::path::Path, req: &Request) -> Result<(), Failure> {
    let reply = request(socket, req)?;
    if !reply.ok {
        return Err(Failure::Runtime(reply.text));
    }
    if !reply.text.is_empty() {
        println!("{}", reply.text);
    }
    Ok(())
}

/// Sends a control request to the one daemon ([`one`]) and prints its answer.
pub fn control(req: Request, gpu: &GpuArg) -> Result<(), Failure> {
    control_at(&one(gpu)?, &req)
}

/// Sends `req` to every GPU's daemon and prints the answers (one daemon: as [`control`];
/// several: each table after a blank line, or one JSON array of their objects with
/// `json`). A daemon that fails is told on stderr; it fails only if all do.
pub fn each(req: Request, json: bool) -> Result<(), Failure> {
    let sockets = gmuxd::daemon_sockets();
    if sockets.len() < 2 {
        return control(req, &GpuArg { gpu: None });
    }
    let mut answers = Vec::new();
    for s in &sockets {
        match request(s, &req) {
            Ok(r) if r.ok => answers.push(r.text),
            Ok(r) => eprintln!("gmux: {}: {}", s.display(), r.text),
            Err(e) => eprintln!("gmux: {}", e.message()),
        }
    }
    if answers.is_empty() {
        return Err(Failure::Runtime(format!("none of the {} daemons in {} did it; each said why above", sockets.len(), gmuxd::run_dir().display())));
    }
    let sep = if json { "," } else { "\n\n" };
    let text = answers.iter().map(|a| a.trim_end()).filter(|a| !a.is_empty()).collect::<Vec<_>>().join(sep);
    if json {
        println!("[{text}]");
    } else if !text.is_empty() {
        println!("{text}");
    }
    Ok(())
}

/// Sends `req`, about tenant `tenant`, to `--gpu`'s daemon, or with several daemons and
/// no `--gpu` to each that knows the tenant (a tenant is per GPU): each answer headed by
/// its GPU, or with `json` one object of them by GPU.
pub fn of_tenant(req: Request, tenant: &str, gpu: &GpuArg, json: bool) -> Result<(), Failure> {
    let sockets = gmuxd::daemon_sockets();
    if gpu.gpu.is_some() || sockets.len() < 2 {
        return control(req, gpu);
    }
    let (mut answers, mut refused) = (Vec::new(), None);
    for s in &sockets {
        let name = s.file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
        match request(s, &req) {
            Ok(r) if r.ok => answers.push((name, r.text)),
            Ok(r) if r.text.starts_with("unknown tenant") => {}
            // Told after what the other daemons did, which stands.
            Ok(r) => refused = refused.or(Some(Failure::Runtime(format!("{name}: {}", r.text)))),
            Err(e) => eprintln!("gmux: {}", e.message()),
        }
    }
    if let Some(e) = refused {
        for (g, t) in &answers {
            println!("{g}: {}", if t.trim().is_empty() { "done" } else { t.trim_end() });
        }
        return Err(e);
    }
    if answers.is_empty() {
        return Err(Failure::Runtime(format!("unknown tenant {tenant:?} on the daemons of {} GPUs: list tenants with `gmux ps`", sockets.len())));
    }
    if json {
        let by_gpu: serde_json::Map<String, serde_json::Value> =
            answers.into_iter().map(|(g, t)| (g, serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)))).collect();
        println!("{}", serde_json::Value::Object(by_gpu));
        return Ok(());
    }
    for (g, t) in answers {
        match t.trim_end() {
            "" => println!("{g}: done"),
            t if t.contains('\n') => println!("{g}:\n{t}"),
            t => println!("{g}: {t}"),
        }
    }
    Ok(())
}
