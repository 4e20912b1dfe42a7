//! One-line messages on stderr, prefixed `gmux:`, filtered by `GMUX_LOG`
//! (`error`, `warn` (default), `info`, `debug`).

use std::sync::OnceLock;

/// Message levels, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// The level set by `GMUX_LOG`.
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("GMUX_LOG").as_deref() {
        Ok("error") => Level::Error,
        Ok("info") => Level::Info,
        Ok("debug") => Level::Debug,
        _ => Level::Warn,
    })
}

/// Writes `msg` if `at` passes the filter.
pub fn emit(at: Level, msg: &str) {
    if at <= level() {
        eprintln!("gmux: {msg}");
    }
}

/// Writes `msg` and exits the process with status 1 (for errors no CUDA call can return).
// The shim is a library loaded into someone else's process: it has no `main` to return an
// error to, and these errors leave no CUDA call able to report them.
#[allow(clippy::exit)]
pub fn fatal(msg: &str) -> ! {
    eprintln!("gmux: {msg}");
    std::process::exit(1)
}

/// `log!(Info, "...", args)`.
#[macro_export]
macro_rules! log {
    ($lvl:ident, $($arg:tt)*) => {
        if $crate::log::Level::$lvl <= $crate::log::level() {
            $crate::log::emit($crate::log::Level::$lvl, &format!($($arg)*));
        }
    };
}

/// UNIX time in seconds, for debug lines that line up with gmuxd's `--verbose` log.
pub fn stamp() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
