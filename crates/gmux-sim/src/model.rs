//! The simulated device's constants. Defaults are figures measured on an H200;
//! every one can be overridden in a scenario's `[device]` table.

use serde::{Deserialize, Serialize};

/// Timing model of one GPU with its host link and local disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceModel {
    /// Pinned host → device bandwidth, GB/s (1e9 bytes/s).
    pub h2d_gbps: f64,
    /// Device → pinned host bandwidth, GB/s.
    pub d2h_gbps: f64,
    /// Both directions at once, in total, GB/s.
    pub duplex_gbps: f64,
    /// Fixed cost of one copy call on a stream, µs.
    pub copy_fixed_us: f64,
    /// `cuMemCreate` per chunk, µs.
    pub create_us: f64,
    /// `cuMemMap` per chunk, µs.
    pub map_us: f64,
    /// `cuMemSetAccess` per mapping on an idle link, µs (the engine's systems charge it
    /// per chunk, batched: 0.49 ms per 4 GiB).
    pub set_access_us: f64,
    /// `cuMemSetAccess` per mapping while the device→host lane moves data, µs: the driver
    /// then takes about a millisecond a handle (H200, 2026-11-28: 1.05 ms a call over a
    /// decoder's fill steps during another tenant's eviction, 0.03 ms once it ended).
    pub set_access_busy_us: f64,
    /// `cuMemUnmap` per chunk, µs.
    pub unmap_us: f64,
    /// `cuMemRelease` per chunk, µs.
    pub release_us: f64,
    /// Disk read bandwidth (O_DIRECT), GB/s.
    pub disk_read_gbps: f64,
    /// Disk write bandwidth (O_DIRECT), GB/s.
    pub disk_write_gbps: f64,
    /// HBM bandwidth for streaming kernels, GB/s.
    pub hbm_gbps: f64,
    /// Dense FP32 throughput for compute-bound kernels, TFLOP/s.
    pub fp32_tflops: f64,
    /// Suspending one tenant's queues and resuming another's, µs (all time-sliced systems).
    pub switch_us: f64,
    /// Demand paging: service time of one GPU page fault, µs (MSched §3: 31.79 µs).
    pub um_fault_us: f64,
    /// Demand paging: bytes migrated per fault (the driver's prefetch unit).
    pub um_fault_bytes: u64,
    /// Native time-slicing between contexts without a software scheduler, µs (the `um` system).
    pub native_timeslice_us: f64,
}

impl Default for DeviceModel {
    fn default() -> Self {
        DeviceModel {
            h2d_gbps: 53.0,
            d2h_gbps: 55.0,
            duplex_gbps: 86.0,
            copy_fixed_us: 3.2,
            create_us: 10.8,
            map_us: 1.2,
            set_access_us: 0.24,
            set_access_busy_us: 1000.0,
            unmap_us: 18.0,
            release_us: 12.0,
            disk_read_gbps: 1.8,
            disk_write_gbps: 1.6,
            hbm_gbps: 4000.0,
            fp32_tflops: 50.0,
            switch_us: 20.0,
            um_fault_us: 31.79,
            um_fault_bytes: 64 << 10,
            native_timeslice_us: 2000.0,
        }
    }
}

impl DeviceModel {
    /// Checks that every rate is positive and finite.
    pub fn validate(&self) -> Result<(), String> {
        let rates = [
            ("h2d_gbps", self.h2d_gbps),
            ("d2h_gbps", self.d2h_gbps),
            ("duplex_gbps", self.duplex_gbps),
            ("disk_read_gbps", self.disk_read_gbps),
            ("disk_write_gbps", self.disk_write_gbps),
            ("hbm_gbps", self.hbm_gbps),
            ("fp32_tflops", self.fp32_tflops),
            ("native_timeslice_us", self.native_timeslice_us),
        ];
        for (name, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("device.{name} = {v}: must be a positive number"));
            }
        }
        let costs = [
            ("copy_fixed_us", self.copy_fixed_us),
            ("create_us", self.create_us),
            ("map_us", self.map_us),
            ("set_access_us", self.set_access_us),
            ("set_access_busy_us", self.set_access_busy_us),
            ("unmap_us", self.unmap_us),
            ("release_us", self.release_us),
            ("switch_us", self.switch_us),
            ("um_fault_us", self.um_fault_us),
        ];
        for (name, v) in costs {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("device.{name} = {v}: must be zero or positive"));
            }
        }
        if self.um_fault_bytes == 0 {
            return Err("device.um_fault_bytes = 0: must be at least 1".into());
        }
        Ok(())
    }

    /// Nanoseconds to move `bytes` at `gbps`.
    pub fn ns(bytes: u64, gbps: f64) -> f64 {
        bytes as f64 / gbps
    }

    /// Time for a transfer volume with both directions overlapped (the `ideal` bound).
    pub fn duplex_ns(&self, h2d: u64, d2h: u64) -> f64 {
        let a = Self::ns(h2d, self.h2d_gbps);
        let b = Self::ns(d2h, self.d2h_gbps);
        a.max(b).max(Self::ns(h2d + d2h, self.duplex_gbps))
    }
}
