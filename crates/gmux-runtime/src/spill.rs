//! A command whose working set exceeds the room: what fits is made resident, the rest
//! is mapped on the host, where the command reaches it over the link
//! ([`gmux_core::spill`]).

use crate::{Error, TenantMemory, WorkingSet};
use gmux_core::device::{Device, Event};
use gmux_core::planner::Move;
use gmux_core::{spill, CHUNK_BYTES};

impl<D: Device> TenantMemory<D> {
    /// Makes what the room holds of `ws` resident and maps the rest on the host, for a
    /// command on stream `on` whose signature is `sig` and whose working set exceeds the
    /// room ([`TenantMemory::prepare`] said [`Error::NoRoom`]). Evictions wait for the
    /// application work `after()` names. Returns the events the command must wait for.
    pub fn prepare_spilled(
        &mut self,
        ws: &WorkingSet,
        on: Option<D::Stream>,
        sig: u64,
        mut after: impl FnMut() -> Vec<D::Fence>,
    ) -> Result<Vec<Event>, Error<D::Error>> {
        let allocs = self.allocs_in(ws);
        let allocs = allocs.as_ref();
        let mut waits = self.landing_waits(allocs, on);
        let need = self.chunks_in(ws, allocs);
        let room = self.room();
        let no_room = Error::NoRoom { need: need.len() as u64 * CHUNK_BYTES, room };
        let Some(split) = spill::split(&self.mem, &need, room / CHUNK_BYTES) else { return Err(no_room) };
        self.sync_ticks();
        let (forecast, _) = self.forecast(Some(sig), allocs);
        let plan = self.plan_for(&split.gpu, split.gpu.len(), &forecast, &mut after, on)?;
        if plan.covered < split.gpu.len() {
            return Err(no_room);
        }
        if !plan.moves.is_empty() {
            let evicts = plan.moves.iter().any(|m| matches!(m, Move::Evict { .. }));
            let after = if evicts { after() } else { Vec::new() };
            waits.extend(self.execute(&plan, &after, |_| true, on)?);
        }
        let to_host = spill::map_on_host(&self.mem, &split.host);
        if !to_host.moves.is_empty() {
            waits.extend(self.execute(&to_host, &[], |_| true, on)?);
        }
        self.stats.spilled += 1;
        self.stats.largest_spill = self.stats.largest_spill.max(split.host.len() as u64 * CHUNK_BYTES);
        self.given(&waits, on);
        Ok(waits)
    }

    /// Bytes mapped on the host now.
    pub fn host_mapped(&self) -> u64 {
        self.mover.host_mapped() * CHUNK_BYTES
    }
}
