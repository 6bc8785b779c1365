//! Validated configuration values shared by the balancers and the outlier detector.

use std::fmt;

/// A fraction from 0 to 1 inclusive: a threshold or a cap. Holding one proves it is in range,
/// so no balancer has to re-check (or clamp) a NaN or a 1.7.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Fraction(f64);

impl Fraction {
    /// Nothing: a threshold that never triggers, a cap that allows nothing.
    pub const ZERO: Fraction = Fraction(0.0);
    /// Everything.
    pub const ONE: Fraction = Fraction(1.0);

    /// Validates `value`: finite and within 0 to 1.
    pub fn new(value: f64) -> Result<Fraction, ConfigError> {
        if (0.0..=1.0).contains(&value) {
            Ok(Fraction(value))
        } else {
            Err(ConfigError::FractionOutOfRange { value })
        }
    }

    /// `percent` / 100 for a constant: a percentage above 100 fails to compile in a `const`
    /// item (and panics elsewhere — use [`from_percent`](Self::from_percent) for input).
    pub const fn percent(percent: u8) -> Fraction {
        assert!(percent <= 100, "a percentage is at most 100");
        Fraction(percent as f64 / 100.0)
    }

    /// `percent` / 100, for settings written as percentages (`max_ejection_percent: 10`).
    pub fn from_percent(percent: u8) -> Result<Fraction, ConfigError> {
        Fraction::new(f64::from(percent) / 100.0)
    }

    /// The value, 0 to 1.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0 * 100.0)
    }
}

/// A balancer or ejection setting that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A threshold or cap outside 0 to 1 (or NaN).
    #[error("must be a fraction from 0 to 1, got {value}")]
    FractionOutOfRange {
        /// The refused value.
        value: f64,
    },
    /// A count or duration that must be positive was zero.
    #[error("{field}: must be greater than zero")]
    Zero {
        /// The setting's name.
        field: &'static str,
    },
    /// The ejection cap is shorter than the first ejection.
    #[error("max_ejection_ms ({max_ms}) is shorter than base_ejection_ms ({base_ms})")]
    MaxEjectionBelowBase {
        /// The base ejection time.
        base_ms: u64,
        /// The cap.
        max_ms: u64,
    },
}

impl ConfigError {
    /// A stable machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::FractionOutOfRange { .. } => "fraction_out_of_range",
            ConfigError::Zero { .. } => "zero_not_allowed",
            ConfigError::MaxEjectionBelowBase { .. } => "max_ejection_below_base",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_outside_zero_to_one_are_refused_with_a_code() {
        assert_eq!(Fraction::new(0.25).unwrap().get(), 0.25);
        assert_eq!(Fraction::from_percent(10).unwrap().get(), 0.1);
        for bad in [-0.01, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(Fraction::new(bad).unwrap_err().code(), "fraction_out_of_range", "{bad}");
        }
        assert!(Fraction::from_percent(101).is_err());
    }
}
