//! The devices the stand-in emulates: `GMUX_STANDIN_DEVICES` physical devices (1 to 8,
//! default 1), of which `CUDA_VISIBLE_DEVICES` picks the visible ones and their order, as
//! the real driver does. Every call answers by visible ordinal; the physical index only
//! shows in a device's UUID, name and PCI bus id.

use std::ffi::OsStr;
use std::sync::LazyLock;

use cuda_abi::CUdevice;

/// The most physical devices `GMUX_STANDIN_DEVICES` may ask for.
pub const MAX_DEVICES: usize = 8;

/// The UUID of physical device `p`: the bytes of "gmux", zeros, then `p` as the last byte,
/// which prints as `GPU-676d7578-0000-0000-0000-0000000000pp`.
pub fn uuid(p: u8) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(b"gmux");
    b[15] = p;
    b
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of 16 UUID bytes, as `nvidia-smi` prints it
/// and `CUDA_VISIBLE_DEVICES` takes it.
pub fn uuid_text(b: &[u8; 16]) -> String {
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", hex(0..4), hex(4..6), hex(6..8), hex(8..10), hex(10..16))
}

/// Parses `GMUX_STANDIN_DEVICES`: a whole number from 1 to [`MAX_DEVICES`].
pub fn parse_count(s: &str) -> Option<u8> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<u8>().ok().filter(|&n| (1..=MAX_DEVICES as u8).contains(&n))
}

/// The physical indices `CUDA_VISIBLE_DEVICES` shows of `n` physical devices, in visible
/// order. Unset (`None`) shows all in order. Otherwise each comma-separated entry is a
/// physical index or a UUID (`GPU-…`, or the start of exactly one); the list ends at the
/// first entry that is neither or names a device already listed, and the rest is ignored,
/// as by the real driver. An empty value shows no device.
pub fn visible(value: Option<&str>, n: u8) -> Vec<u8> {
    let Some(value) = value else { return (0..n).collect() };
    let mut shown = Vec::new();
    for e in value.split(',') {
        match entry(e.trim(), n) {
            Some(p) if !shown.contains(&p) => shown.push(p),
            _ => break,
        }
    }
    shown
}

/// The physical device one `CUDA_VISIBLE_DEVICES` entry names, if exactly one.
fn entry(e: &str, n: u8) -> Option<u8> {
    if !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()) {
        return e.parse::<u8>().ok().filter(|&p| p < n);
    }
    if !e.starts_with("GPU-") {
        return None;
    }
    let mut hits = (0..n).filter(|&p| uuid_text(&uuid(p)).get(..e.len()).is_some_and(|u| u.eq_ignore_ascii_case(e)));
    match (hits.next(), hits.next()) {
        (Some(p), None) => Some(p),
        _ => None,
    }
}

/// The devices of this process: how many are installed, and which of them are visible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    installed: u8,
    /// Visible ordinal -> physical index.
    physical: Vec<u8>,
}

impl Devices {
    /// `installed` physical devices, with `CUDA_VISIBLE_DEVICES` = `visible_var` (`None`:
    /// unset).
    pub fn new(installed: u8, visible_var: Option<&str>) -> Devices {
        Devices { installed, physical: visible(visible_var, installed) }
    }

    /// How many devices are visible (`cuDeviceGetCount`).
    pub fn count(&self) -> usize {
        self.physical.len()
    }

    /// The visible ordinal `dev` as an index, if there is such a device.
    pub fn ordinal(&self, dev: CUdevice) -> Option<usize> {
        usize::try_from(dev).ok().filter(|&i| i < self.count())
    }

    /// The physical index of visible ordinal `i` (`i` < [`count`](Self::count)).
    pub fn physical(&self, i: usize) -> u8 {
        self.physical[i]
    }

    /// The UUID of visible ordinal `i`.
    pub fn uuid(&self, i: usize) -> [u8; 16] {
        uuid(self.physical(i))
    }

    /// The name of visible ordinal `i`, NUL-terminated. With several devices installed it
    /// ends with the physical index; with one it is the stand-in's plain name.
    pub fn name(&self, i: usize) -> String {
        match self.installed {
            1 => "gmux CUDA stand-in (CPU)\0".to_owned(),
            _ => format!("gmux CUDA stand-in (CPU) {}\0", self.physical(i)),
        }
    }

    /// The PCI bus number of visible ordinal `i`: 0x10 plus its physical index.
    pub fn pci_bus(&self, i: usize) -> u8 {
        0x10 + self.physical(i)
    }
}

/// Reads `GMUX_STANDIN_DEVICES` and `CUDA_VISIBLE_DEVICES`; aborts with one line on stderr
/// if the first is not a number from 1 to [`MAX_DEVICES`].
pub(super) fn from_env() -> Devices {
    let installed = match std::env::var("GMUX_STANDIN_DEVICES") {
        Ok(v) => parse_count(&v).unwrap_or_else(|| {
            eprintln!("cuda-standin: GMUX_STANDIN_DEVICES={v:?} must be a whole number from 1 to {MAX_DEVICES}");
            std::process::abort()
        }),
        Err(std::env::VarError::NotPresent) => 1,
        Err(std::env::VarError::NotUnicode(v)) => {
            eprintln!("cuda-standin: GMUX_STANDIN_DEVICES={v:?} must be a whole number from 1 to {MAX_DEVICES}");
            std::process::abort()
        }
    };
    let var = std::env::var_os("CUDA_VISIBLE_DEVICES");
    Devices::new(installed, var.as_deref().map(OsStr::to_string_lossy).as_deref())
}

/// The process's devices, read from the environment on first use. Unit tests run with
/// three installed devices, all visible, whatever the environment says: their threads
/// share one process, so they neither race on nor depend on the variables.
pub static DEVICES: LazyLock<Devices> = LazyLock::new(|| if cfg!(test) { Devices::new(3, None) } else { from_env() });

/// The process's devices.
pub fn devices() -> &'static Devices {
    &DEVICES
}
