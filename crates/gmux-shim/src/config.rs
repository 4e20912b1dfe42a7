//! Settings from `GMUX_*` environment variables, read once.

use gmux_core::size::parse_size;
use gmux_core::CHUNK_BYTES;
use std::sync::OnceLock;

pub use gmux_cuda::device::MoverMode;

/// The shim's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `GMUX_MEM_LIMIT`: device memory this process may keep resident; `None` is the
    /// card's free memory at start.
    pub mem_limit: Option<u64>,
    /// `GMUX_INFLIGHT`: most released, unfinished commands per stream.
    pub inflight: usize,
    /// `GMUX_MOVER`: `pipelined` (default) or `sequential`.
    pub mover: MoverMode,
    /// `GMUX_PREDICT=tenant`: treat every command as touching all memory (debugging).
    pub whole_tenant: bool,
    /// `GMUX_UNMAP=strict`: unmap evicted chunks before going on (debugging prediction).
    pub strict_unmap: bool,
    /// `GMUX_HOST_BLOCK`: bytes pinned per host-pool block.
    pub host_block: u64,
    /// `GMUX_EXTENT`: chunks moved together with one physical handle (default 64, 128 MiB).
    pub extent_chunks: u32,
    /// `GMUX_EVICT=opt` (default): OPT over the forecast from the process's own history
    /// where its recent commands ran before, LRU elsewhere; `lru`: LRU always.
    pub history_opt: bool,
    /// `GMUX_PREFETCH`: with a forecast, a plan also brings in what the next this many
    /// commands use, where that evicts nothing needed sooner (0: off).
    pub prefetch: usize,
    /// `GMUX_DEBUG`: aids for finding ordering and prediction bugs.
    pub debug: Debug,
    /// `GMUX_DAEMON`: where to register (set by `gmux run`): a directory of per-GPU
    /// sockets named by UUID, or one daemon's socket; `None`: the process runs alone
    /// under its own limit.
    pub daemon: Option<std::path::PathBuf>,
    /// `GMUX_EXE`: the gmux executable (set by `gmux run`), which starts the daemon of
    /// this process's GPU when none runs.
    pub exe: Option<std::path::PathBuf>,
    /// `GMUX_TENANT`: the tenant this process joins (default: the program's name and pid).
    pub tenant: String,
    /// `GMUX_PRIORITY`: its strict-priority class (larger first; default 0).
    pub priority: i32,
    /// `GMUX_OVERSIZE`: what a command whose working set exceeds the limit does.
    pub oversize: Oversize,
    /// `GMUX_MEMINFO=limit`: `cuMemGetInfo` reports the limit as the device's size; by
    /// default (`device`) it reports the device's own size.
    pub meminfo_limit: bool,
    /// `GMUX_RECYCLE`: bytes of freed allocations kept, with their memory, for the next
    /// request of the same size; `None`: the room under the limit that live allocations
    /// leave.
    pub recycle: Option<u64>,
    /// `GMUX_POLICY`: an eBPF object file whose memory programs this process runs, beside
    /// those the daemon attaches ([`crate::policy`]).
    pub policy: Option<std::path::PathBuf>,
}

/// What a command whose working set exceeds the limit does (`GMUX_OVERSIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    /// `host` (default): what the limit cannot hold runs from host memory mapped at its
    /// own addresses, reached over the link.
    Host,
    /// `exit`: the process ends with status 86 and a message.
    Exit,
    /// `error`: the call returns `CUDA_ERROR_OUT_OF_MEMORY`.
    Error,
}

/// `GMUX_DEBUG`, a comma-separated list; each item trades speed for a narrower search.
#[derive(Debug, Clone, Default)]
pub struct Debug {
    /// `sync-before`: the host waits for all work of the context before a plan that evicts.
    pub sync_before: bool,
    /// `sync-after`: the host waits for the mover's copies after every plan.
    pub sync_after: bool,
    /// `runN`: merge at most N chunks into one copy (`run1`: no merging).
    pub run: Option<usize>,
    /// `all-events`: record every populate event, not only the awaited ones.
    pub all_events: bool,
    /// `resolve`: log, once each, driver entry points resolved that gmux does not wrap.
    pub resolve: bool,
    /// `panic:SYMBOL`: panic inside gmux's handling of SYMBOL (checks the C boundary).
    pub panic_in: Option<String>,
    /// `working-sets`: one line per kernel launch on stderr with the allocations its
    /// pointers fall in ([`crate::predict::log_working_set`]).
    pub working_sets: bool,
    /// `profile`: at exit, the time gmux's handlers took per entry point, beside the
    /// driver's ([`crate::profile`]).
    pub profile: bool,
}

fn debug_flags() -> Debug {
    let mut d = Debug::default();
    const AIDS: &str = "sync-before, sync-after, runN, all-events, resolve, working-sets, profile, panic:SYMBOL";
    for item in var("GMUX_DEBUG").unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "sync-before" => d.sync_before = true,
            "sync-after" => d.sync_after = true,
            v if v.starts_with("run") && v[3..].parse::<usize>().is_ok_and(|n| n > 0) => d.run = v[3..].parse().ok(),
            "all-events" => d.all_events = true,
            "resolve" => d.resolve = true,
            "working-sets" => d.working_sets = true,
            "profile" => d.profile = true,
            v if v.starts_with("panic:") && v.len() > 6 => d.panic_in = Some(v[6..].to_string()),
            v => crate::log::fatal(&format!("GMUX_DEBUG={v}: use a comma-separated list of {AIDS}")),
        }
    }
    d
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn size_var(name: &str) -> Option<u64> {
    let v = var(name)?;
    match parse_size(&v) {
        Ok(b) => Some(b),
        Err(e) => crate::log::fatal(&format!("{name}={v}: {e}")),
    }
}

/// The settings, parsed on first use; a bad value stops the process with a message.
pub fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let inflight = match var("GMUX_INFLIGHT").map(|v| v.parse::<usize>()) {
            None => 256,
            Some(Ok(n)) if n > 0 => n,
            Some(_) => crate::log::fatal("GMUX_INFLIGHT must be a positive integer (commands in flight per stream), e.g. 256"),
        };
        let mover = match var("GMUX_MOVER").as_deref() {
            None | Some("pipelined") => MoverMode::Pipelined,
            Some("sequential") => MoverMode::Sequential,
            Some(v) => crate::log::fatal(&format!("GMUX_MOVER={v}: use `pipelined` or `sequential`")),
        };
        let whole_tenant = match var("GMUX_PREDICT").as_deref() {
            None | Some("args") => false,
            Some("tenant") => true,
            Some(v) => crate::log::fatal(&format!("GMUX_PREDICT={v}: use `args` (default) or `tenant`")),
        };
        let strict_unmap = match var("GMUX_UNMAP").as_deref() {
            None | Some("deferred") => false,
            Some("strict") => true,
            Some(v) => crate::log::fatal(&format!("GMUX_UNMAP={v}: use `deferred` (default) or `strict`")),
        };
        let extent = size_var("GMUX_EXTENT").unwrap_or(128 << 20);
        if extent < CHUNK_BYTES || !extent.is_multiple_of(CHUNK_BYTES) || extent > 1 << 30 {
            crate::log::fatal(&format!("GMUX_EXTENT={extent} bytes: use a multiple of 2M from 2M to 1G, e.g. 128M (the default)"));
        }
        let history_opt = match var("GMUX_EVICT").as_deref() {
            None | Some("opt") => true,
            Some("lru") => false,
            Some(v) => crate::log::fatal(&format!("GMUX_EVICT={v}: use `opt` (default: OPT from the process's history, LRU where it has none) or `lru`")),
        };
        let prefetch = match var("GMUX_PREFETCH").map(|v| v.parse::<usize>()) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => crate::log::fatal("GMUX_PREFETCH must be a number of commands to look ahead (0: off), e.g. 16"),
        };
        let priority = match var("GMUX_PRIORITY").map(|v| v.parse::<i32>()) {
            None => 0,
            Some(Ok(p)) => p,
            Some(Err(_)) => crate::log::fatal("GMUX_PRIORITY must be an integer priority class (larger runs first), e.g. 1"),
        };
        let oversize = match var("GMUX_OVERSIZE").as_deref() {
            None | Some("host") => Oversize::Host,
            Some("exit") => Oversize::Exit,
            Some("error") => Oversize::Error,
            Some(v) => crate::log::fatal(&format!(
                "GMUX_OVERSIZE={v}: use `host` (default: what does not fit runs from host memory), `exit` (end the process with a message) or `error` (return CUDA_ERROR_OUT_OF_MEMORY)"
            )),
        };
        let meminfo_limit = match var("GMUX_MEMINFO").as_deref() {
            None | Some("device") => false,
            Some("limit") => true,
            Some(v) => crate::log::fatal(&format!(
                "GMUX_MEMINFO={v}: use `device` (default: cuMemGetInfo reports the device's size) or `limit` (it reports the limit)"
            )),
        };
        let tenant = var("GMUX_TENANT").unwrap_or_else(|| {
            let exe = std::env::current_exe().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
            format!("{}-{}", exe.unwrap_or_else(|| "app".into()), std::process::id())
        });
        Config {
            oversize,
            meminfo_limit,
            daemon: var("GMUX_DAEMON").map(Into::into),
            exe: var("GMUX_EXE").map(Into::into),
            tenant,
            priority,
            prefetch,
            history_opt,
            strict_unmap,
            extent_chunks: (extent / CHUNK_BYTES) as u32,
            mem_limit: size_var("GMUX_MEM_LIMIT"),
            inflight,
            mover,
            whole_tenant,
            host_block: size_var("GMUX_HOST_BLOCK").unwrap_or(256 << 20),
            recycle: size_var("GMUX_RECYCLE"),
            policy: var("GMUX_POLICY").filter(|p| !p.is_empty()).map(Into::into),
            debug: debug_flags(),
        }
    })
}
