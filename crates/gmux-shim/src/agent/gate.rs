//! Where the application's threads wait for the daemon: at the launch gate while the
//! process is paused, and for a grant that covers a command's working set.

use super::{agent, Ordering};
use crate::config::config;
use crate::log::stamp;
use gmux_core::size::format_size;
use std::time::Duration;

/// Waits while the daemon has paused device `dev`'s work in this process (no-op when not
/// registered).
pub fn gate(dev: usize) {
    let Some(a) = agent(dev) else { return };
    if a.open.load(Ordering::Acquire) {
        return;
    }
    let mut l = a.lock();
    if !l.open {
        l.poke = true;
        a.changed.notify_all();
    }
    l.waiting += 1;
    let t0 = std::time::Instant::now();
    let mut told = Duration::ZERO;
    while !l.open {
        l = a.changed.wait_timeout(l, SAY_WAIT).unwrap_or_else(|p| p.into_inner()).0;
        if !l.open && t0.elapsed() >= told + SAY_WAIT {
            told = t0.elapsed();
            crate::log!(
                Warn,
                "waiting {:.0} s for a turn from gmuxd: tenant {:?} is frozen, or others run now; `gmux ps` shows who",
                told.as_secs_f64(),
                config().tenant
            );
        }
    }
    l.waiting -= 1;
}

/// How long a wait for the daemon goes before the process says what it waits for (and
/// again after each as long).
const SAY_WAIT: Duration = Duration::from_secs(5);

/// Blocks until device `dev`'s grant covers `need` bytes, telling the daemon what is
/// waiting (a lost daemon's next one: growing without one could oversubscribe the budget).
pub fn wait_grant(dev: usize, need: u64) {
    let Some(a) = agent(dev) else { return };
    let t0 = stamp();
    let mut l = a.lock();
    l.blocked = need;
    l.poke = true;
    a.changed.notify_all();
    let since = std::time::Instant::now();
    let mut told = Duration::ZERO;
    while l.grant.cap < need {
        l = a.changed.wait_timeout(l, SAY_WAIT).unwrap_or_else(|p| p.into_inner()).0;
        if l.grant.cap < need && since.elapsed() >= told + SAY_WAIT {
            told = since.elapsed();
            if l.lost {
                crate::log!(
                    Warn,
                    "waiting {:.0} s for gmuxd to come back: a command needs {}, more than the last grant of {}; start it with `gmux daemon` (or any `gmux run`) at {}",
                    told.as_secs_f64(),
                    format_size(need),
                    format_size(l.grant.cap),
                    super::connect::socket(dev)
                );
                continue;
            }
            crate::log!(
                Warn,
                "waiting {:.0} s for gmuxd to grant a command's {}: tenant {:?} has {} (at most {}); the others hold or protect (gmem.limit.low) the rest; `gmux ps` shows who",
                told.as_secs_f64(),
                format_size(need),
                config().tenant,
                format_size(l.grant.cap),
                format_size(l.grant.most)
            );
        }
    }
    l.blocked = 0;
    crate::log!(Debug, "agent {t0:.3}: a launch waited {:.2} ms for a grant of {}", (stamp() - t0) * 1e3, format_size(need));
}
