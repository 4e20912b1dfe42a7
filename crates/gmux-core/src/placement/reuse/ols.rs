//! The running least-squares fit RD = m·VTD + b of GMT-Reuse.

/// Samples needed before the fit replaces RD = VTD.
const MIN_SAMPLES: f64 = 32.0;

/// Running least squares (Welford co-moments, numerically stable for large VTDs).
#[derive(Debug, Clone, Default)]
pub(super) struct Ols {
    pub(super) n: f64,
    pub(super) mean_x: f64,
    pub(super) mean_y: f64,
    cxx: f64,
    cxy: f64,
}

impl Ols {
    pub(super) fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        let dx = x - self.mean_x;
        self.mean_x += dx / self.n;
        self.mean_y += (y - self.mean_y) / self.n;
        self.cxx += dx * (x - self.mean_x);
        self.cxy += dx * (y - self.mean_y);
    }

    /// (m, b). With no spread in VTD (e.g. one pure cycle) the line goes through the origin.
    pub(super) fn fit(&self) -> (f64, f64) {
        if self.n < MIN_SAMPLES {
            return (1.0, 0.0);
        }
        if self.cxx / self.n <= 1e-9 * self.mean_x.powi(2).max(1.0) {
            return if self.mean_x > 0.0 { (self.mean_y / self.mean_x, 0.0) } else { (1.0, 0.0) };
        }
        let m = self.cxy / self.cxx;
        (m, self.mean_y - m * self.mean_x)
    }
}
