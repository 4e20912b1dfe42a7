//! The devices of a process that reach each other's gmux memory. A mapping granted to
//! its own device alone fails every copy issued from another device's context with
//! `CUDA_ERROR_INVALID_VALUE` (even a copy from the host into it) and faults a kernel of
//! another device that reads it (`gpu/peer_probe.cu`), where memory from `cuMemAlloc`
//! works. So once a process uses a second device, every mapping of each of its devices
//! grants access to all of them, as [`access`] lists, and the mappings made before are
//! granted again ([`super::CudaDevice::grant_peers`]). A process of one device grants
//! its own alone: access to each more device doubles the cost of a mapping (32 to 37 µs
//! per 2 MiB for one device, 63 to 76 µs for two: docs/benchmarks.md).

use crate::cuda::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Devices every mapping grants access to, one bit per ordinal.
static PEERS: AtomicU32 = AtomicU32::new(0);

/// Most devices (ordinals 0 to 31) that can be peers.
pub const MAX_PEERS: usize = 32;

/// Makes device `ordinal` one whose memory the process's other peers reach, and which
/// reaches theirs; returns the mask before (bit per ordinal).
pub fn add_peer(ordinal: i32) -> u32 {
    match usize::try_from(ordinal).ok().filter(|o| *o < MAX_PEERS) {
        Some(o) => PEERS.fetch_or(1 << o, Ordering::SeqCst),
        None => PEERS.load(Ordering::SeqCst),
    }
}

/// The devices every mapping grants access to, one bit per ordinal.
pub fn peers() -> u32 {
    PEERS.load(Ordering::SeqCst)
}

/// The access descriptors of a mapping on device `own` under the peer mask `mask`: its
/// own device, then every peer.
pub(super) fn access(own: i32, mask: u32) -> Vec<CUmemAccessDesc> {
    let desc = |id| CUmemAccessDesc { location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id }, flags: CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    let others = (0..MAX_PEERS as i32).filter(|&d| d != own && mask & (1 << d) != 0);
    std::iter::once(own).chain(others).map(desc).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_grants_its_own_device_first_then_each_peer_once() {
        let ids = |own, mask| access(own, mask).iter().map(|d| d.location.id).collect::<Vec<_>>();
        assert_eq!(ids(0, 0), vec![0]);
        assert_eq!(ids(1, 0b1), vec![1, 0]);
        assert_eq!(ids(2, 0b111), vec![2, 0, 1]);
        assert_eq!(ids(3, 1 << 31 | 0b1000), vec![3, 31]);
        assert!(access(0, 0b11).iter().all(|d| d.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE && d.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE));
    }
}
