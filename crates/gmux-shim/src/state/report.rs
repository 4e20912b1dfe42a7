//! What the shim tells the user about the process's memory: the summary at exit, and the
//! note on commands over the limit.

use super::Shim;
use gmux_core::size::format_size;
use gmux_core::CHUNK_BYTES;

impl Shim {
    /// The one-line summary printed at exit.
    pub fn summary(&self) -> String {
        let s = &self.memory.stats;
        let m = s.moved;
        format!(
            "limit {}, allocated {}, peak allocated {}, peak resident {}, commands {} ({} waited for memory), evicted {} ({}), populated {} ({}), created {}, pinned host {}, streams {}, waits for others' populations {}, plans {} ({} in OPT order from history)",
            format_size(self.limit()),
            format_size(self.allocated()),
            format_size(s.peak_allocated),
            format_size(s.peak_resident),
            s.commands,
            s.waited,
            m.evicted,
            format_size(m.evicted * CHUNK_BYTES),
            m.populated,
            format_size(m.populated * CHUNK_BYTES),
            m.created,
            format_size(self.memory.dev.pinned_bytes()),
            self.inflight.streams(),
            s.waits_for_others,
            s.plans,
            s.forecast_plans,
        ) + &self.recycle_summary()
            + &self.spill_summary()
    }

    /// The summary's part on freed ranges handed out again (empty when none were).
    fn recycle_summary(&self) -> String {
        match self.recycled.reused {
            0 => String::new(),
            n => format!(", freed ranges reused {n} ({} kept at exit)", format_size(self.recycled.bytes())),
        }
    }

    /// The summary's part on commands over the limit (empty when there were none).
    fn spill_summary(&self) -> String {
        let s = &self.memory.stats;
        if s.spilled == 0 {
            return String::new();
        }
        format!(", commands over the limit {} (at most {} of one mapped on the host)", s.spilled, format_size(s.largest_spill))
    }
}

/// Says, the first time, that a command over the limit runs with part of its working set
/// in host memory; the later ones go to the debug log.
pub(super) fn note_spill(need: u64, limit: u64, spilled: u64) {
    let level = if spilled == 1 { crate::log::Level::Warn } else { crate::log::Level::Debug };
    crate::log::emit(
        level,
        &format!(
            "a command needs {} resident at once, over the memory limit of {}: what does not fit runs from host memory mapped at its own addresses, which the GPU reaches over the link (slower); raise --mem-limit (GMUX_MEM_LIMIT) to at least {} to keep it all in GPU memory, or set GMUX_OVERSIZE=exit to stop instead",
            format_size(need),
            format_size(limit),
            format_size(need)
        ),
    );
}
