//! When an endpoint is ejected and for how long.

use crate::balance::{ConfigError, Fraction};

/// Outlier-ejection settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EjectionConfig {
    /// Failures in a row that eject an endpoint.
    pub consecutive_failures: u32,
    /// The first ejection's length; the n-th (recent) one lasts n times this.
    pub base_ejection_ms: u64,
    /// No ejection lasts longer than this.
    pub max_ejection_ms: u64,
    /// At most this fraction of the known endpoints is ejected at once (rounded down).
    pub max_ejected: Fraction,
}

/// Envoy's default: five in a row is past what a single bad connection or a deploy blip
/// produces, and soon enough that a dead endpoint costs a caller few requests.
const DEFAULT_CONSECUTIVE_FAILURES: u32 = 5;
/// Envoy's default base ejection time: long enough for a restart or a GC storm to clear.
const DEFAULT_BASE_EJECTION_MS: u64 = 30_000;
/// Envoy's default cap: a chronically failing endpoint is retried every five minutes, so a
/// client notices when it recovers even if the registry never says anything.
const DEFAULT_MAX_EJECTION_MS: u64 = 300_000;
/// Half (Envoy's default is 10%): with rounding down, 10% ejects nothing in the many services
/// of fewer than ten endpoints, while half lets a service of two or three route around one bad
/// endpoint. Never more than half, so that ejection alone cannot push a set below the default
/// 50% panic threshold.
const DEFAULT_MAX_EJECTED: Fraction = Fraction::percent(50);

/// Far below one endpoint (no set has 10^9 endpoints), far above f64's error on a product.
const ROUNDING_NUDGE: f64 = 1e-9;

impl Default for EjectionConfig {
    fn default() -> Self {
        EjectionConfig {
            consecutive_failures: DEFAULT_CONSECUTIVE_FAILURES,
            base_ejection_ms: DEFAULT_BASE_EJECTION_MS,
            max_ejection_ms: DEFAULT_MAX_EJECTION_MS,
            max_ejected: DEFAULT_MAX_EJECTED,
        }
    }
}

impl EjectionConfig {
    /// Checks that the settings can work: counts and times positive, cap not below base.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.consecutive_failures == 0 {
            return Err(ConfigError::Zero {
                field: "consecutive_failures",
            });
        }
        if self.base_ejection_ms == 0 {
            return Err(ConfigError::Zero {
                field: "base_ejection_ms",
            });
        }
        if self.max_ejection_ms < self.base_ejection_ms {
            return Err(ConfigError::MaxEjectionBelowBase {
                base_ms: self.base_ejection_ms,
                max_ms: self.max_ejection_ms,
            });
        }
        Ok(())
    }

    /// How many of `known` endpoints may be ejected at once.
    pub fn ejection_limit(&self, known: usize) -> usize {
        // The nudge keeps binary fractions from rounding a whole limit down: 100 × 0.29 is
        // 28.999999999999996 in f64, and the limit meant is 29.
        (known as f64 * self.max_ejected.get() + ROUNDING_NUDGE).floor() as usize
    }
}
