//! What one run is given: the system under test, the device, the policies and the tenants.

use crate::model::DeviceModel;
use crate::workload::Source;
use gmux_core::evict::Eviction;
use gmux_core::memory::Capacities;
use gmux_core::placement::PlacementKind;
use gmux_core::sched::Policy;

/// The systems compared, by their fixed names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// No oversubscription: unlimited GPU memory. The normalizer.
    InHbm,
    /// Demand paging with native fine-grained time slicing (modelled).
    Um,
    /// Demand paging under the scenario's software time slicing (modelled).
    XschedUm,
    /// gmux with allocation-granular working-set prediction.
    GmuxAlloc,
    /// gmux with exact working sets.
    GmuxExact,
    /// gmux as gmuxd and the shim run it: the daemon's arbiter over per-process runtimes.
    Gmuxd,
}

impl System {
    /// The fixed name.
    pub fn name(self) -> &'static str {
        match self {
            System::InHbm => "in-hbm",
            System::Um => "um",
            System::XschedUm => "xsched-um",
            System::GmuxAlloc => "gmux-alloc",
            System::GmuxExact => "gmux-exact",
            System::Gmuxd => "gmuxd",
        }
    }

    pub(super) fn demand_paged(self) -> bool {
        matches!(self, System::Um | System::XschedUm)
    }
}

/// One tenant of a run.
pub struct TenantSetup {
    /// Name.
    pub name: String,
    /// Its commands.
    pub source: Box<dyn Source>,
    /// Strict-priority class.
    pub priority: i32,
    /// Weighted-share weight.
    pub weight: u32,
    /// `compute.timeslice`, ns.
    pub timeslice: u64,
    /// `gmem.limit.high`, bytes.
    pub limit_high: Option<u64>,
    /// `gmem.limit.low`, bytes.
    pub limit_low: u64,
}

/// Everything one run needs.
pub struct RunSpec<'a> {
    /// Which system.
    pub system: System,
    /// Device constants.
    pub model: &'a DeviceModel,
    /// Tier capacities (GPU is ignored for in-hbm).
    pub caps: Capacities,
    /// Time-slice policy.
    pub policy: Policy,
    /// Eviction order for the gmux systems.
    pub eviction: Eviction,
    /// Tier placement of victims.
    pub placement: PlacementKind,
    /// Simulated time to cover, ns.
    pub duration_ns: f64,
    /// Tenants.
    pub tenants: Vec<TenantSetup>,
    /// Keep the executed access sequence (for the `ideal` bound).
    pub record_accesses: bool,
    /// Seed for randomized policies.
    pub seed: u64,
}
