//! An allocation at more than one address: the application mapped one of its physical
//! allocations a second time (the shim's `appvmm`). The chunks keep one address of their
//! own, which copies use; each mapping of their physical memory is also made at every
//! alias, and each unmap undone there (the deferred unmaps of an eviction included).

use super::{check, CudaDevice, CudaError, CHUNK};
use crate::cuda::*;
use gmux_core::ChunkId;

/// The chunks of one allocation, `first..first + count`.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// First chunk.
    pub first: ChunkId,
    /// Chunks.
    pub count: u32,
}

impl Span {
    fn contains(&self, c: ChunkId) -> bool {
        c.0 >= self.first.0 && c.0 - self.first.0 < self.count
    }

    fn at(&self, base: CUdeviceptr, c: ChunkId) -> CUdeviceptr {
        base + u64::from(c.0 - self.first.0) * CHUNK as u64
    }

    fn chunks(&self) -> impl Iterator<Item = ChunkId> {
        let first = self.first.0;
        (first..first + self.count).map(ChunkId)
    }
}

impl CudaDevice {
    /// Maps the allocation's chunks at `base` too: those resident now at once, the others
    /// as they come in. `base` is reserved and free. On failure nothing stays mapped there
    /// and nothing is recorded.
    pub fn alias(&mut self, span: Span, base: CUdeviceptr) -> Result<(), CudaError> {
        self.complete_deferred()?;
        let resident: Vec<(ChunkId, u64, u32)> = self.mapped.iter().filter(|(c, _)| span.contains(**c)).map(|(c, (p, n))| (*c, *p, *n)).collect();
        let mut runs = Vec::new();
        let mapped = resident.into_iter().try_for_each(|(c, phys, n)| {
            let (va, bytes) = (span.at(base, c), n as usize * CHUNK);
            self.settle_at(va, bytes)?;
            check(self.times.time(super::flush::Call::Map, || crate::real!(cuMemMap(va, bytes, 0, phys, 0))), "cuMemMap")?;
            runs.push((va, bytes));
            Ok(())
        });
        if let Err(e) = mapped.and_then(|()| self.grant(runs.clone())) {
            for (va, bytes) in runs {
                crate::real!(cuMemUnmap(va, bytes));
            }
            return Err(e);
        }
        for c in span.chunks() {
            self.aliases.entry(c).or_default().push(span.at(base, c));
        }
        Ok(())
    }

    /// Makes the alias at `base` the chunks' own address; the old one becomes an alias.
    pub fn rehome(&mut self, span: Span, base: CUdeviceptr) {
        self.complete_or_log();
        for c in span.chunks() {
            let new = span.at(base, c);
            let old = std::mem::replace(&mut self.chunk_va[c.0 as usize], new);
            if let Some(v) = self.aliases.get_mut(&c) {
                v.iter_mut().filter(|va| **va == new).for_each(|va| *va = old);
            }
        }
    }

    /// Unmaps the alias at `base` and forgets it. Nothing may use the address any more: the
    /// caller has waited for the commands that did and for the mover
    /// ([`CudaDevice::synchronize`]).
    pub fn unalias(&mut self, span: Span, base: CUdeviceptr) -> Result<(), CudaError> {
        self.complete_deferred()?;
        for c in span.chunks() {
            let va = span.at(base, c);
            if let Some(v) = self.aliases.get_mut(&c) {
                v.retain(|x| *x != va);
                if v.is_empty() {
                    self.aliases.remove(&c);
                }
            }
        }
        let resident: Vec<(ChunkId, u32)> = self.mapped.iter().filter(|(c, _)| span.contains(**c)).map(|(c, (_, n))| (*c, *n)).collect();
        for (c, n) in resident {
            let (va, bytes) = (span.at(base, c), n as usize * CHUNK);
            check(self.times.time(super::flush::Call::Unmap, || crate::real!(cuMemUnmap(va, bytes))), "cuMemUnmap")?;
        }
        Ok(())
    }
}
