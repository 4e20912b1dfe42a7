//! What one run measured, overall and per tenant.

/// What a tenant achieved.
#[derive(Debug, Clone, Default)]
pub struct TenantOutcome {
    /// Tasks (or requests) finished.
    pub tasks: u64,
    /// Request latencies, ns (tenants with arrivals only).
    pub latencies_ns: Vec<f64>,
    /// Whether its commands arrive as requests.
    pub latency_critical: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per tenant, in setup order.
    pub tenants: Vec<TenantOutcome>,
    /// Simulated time covered, ns.
    pub elapsed_ns: f64,
    /// GPU busy time running commands, ns.
    pub compute_ns: f64,
    /// Bytes host → device.
    pub bytes_h2d: u64,
    /// Bytes device → host.
    pub bytes_d2h: u64,
    /// Bytes read from disk.
    pub bytes_disk_read: u64,
    /// Bytes written to disk.
    pub bytes_disk_write: u64,
    /// Demand page faults.
    pub faults: u64,
    /// Commands released with a touched chunk not resident.
    pub violations: u64,
    /// Executed commands' chunks in order, when recorded.
    pub accesses: crate::ideal::Commands,
}
