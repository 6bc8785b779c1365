//! Latency histograms: [`hdrhistogram`] at three significant digits (every percentile within
//! 0.1 % of the true value), growing to whatever range the run needs, mergeable across
//! workers, plus the exact maximum.
//!
//! A closed-loop worker waits for each reply before it sends the next request, so a stall
//! delays the requests it would have sent meanwhile and hides them from the percentiles
//! (coordinated omission). [`Histogram::corrected`] adds them back the way
//! `hdrhistogram::Histogram::record_correct` does: a value longer than the expected interval
//! also counts the requests that interval would have started during it.
//!
//! ```text
//!  interval 1 ms, one 5 ms stall ──record_correct──▶ 5 ms, 4 ms, 3 ms, 2 ms, 1 ms
//! ```

use std::time::Duration;

/// Significant digits kept: 3, so a percentile is off by at most 0.1 %.
const SIGNIFICANT_DIGITS: u8 = 3;
/// The range allocated at first, one minute in ns; a longer value grows it.
const INITIAL_MAX_NS: u64 = 60_000_000_000;

/// Latencies in nanoseconds.
#[derive(Clone)]
pub struct Histogram {
    inner: hdrhistogram::Histogram<u64>,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.inner.len())
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        let mut inner = hdrhistogram::Histogram::new_with_max(INITIAL_MAX_NS, SIGNIFICANT_DIGITS)
            .expect("a minute at 3 significant digits is a valid range");
        inner.auto(true);
        Histogram { inner, max: 0 }
    }

    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        self.record_nanos(nanos(latency));
    }

    /// Counts one value in nanoseconds.
    pub fn record_nanos(&mut self, nanos: u64) {
        // An auto-resizing histogram grows to take the value; only a value past what it can
        // ever track (near u64::MAX) is clamped.
        if self.inner.record(nanos).is_err() {
            self.inner.saturating_record(nanos);
        }
        self.max = self.max.max(nanos);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        self.inner
            .add(&other.inner)
            .expect("auto-resizing histograms of the same precision always add");
        self.max = self.max.max(other.max);
    }

    /// This histogram corrected for coordinated omission with `expected` as the interval
    /// between requests a worker meant to keep (module docs). An `expected` of zero returns
    /// the values as they are.
    pub fn corrected(&self, expected: Duration) -> Histogram {
        let interval = nanos(expected);
        if interval == 0 {
            return self.clone();
        }
        Histogram {
            inner: self.inner.clone_correct(interval),
            max: self.max,
        }
    }

    /// How many values were counted.
    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    /// The largest value counted, exactly.
    pub fn max(&self) -> Option<Duration> {
        (self.count() > 0).then(|| Duration::from_nanos(self.max))
    }

    /// The mean (within the histogram's precision).
    pub fn mean(&self) -> Option<Duration> {
        (self.count() > 0).then(|| Duration::from_nanos(self.inner.mean() as u64))
    }

    /// The smallest value `v` such that at least `quantile` of the values are `<= v`, within
    /// 0.1 % and never above the exact maximum. `None` when empty.
    pub fn quantile(&self, quantile: f64) -> Option<Duration> {
        (self.count() > 0).then(|| {
            let value = self.inner.value_at_quantile(quantile.clamp(0.0, 1.0));
            Duration::from_nanos(value.min(self.max))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(value: Duration, truth: f64) -> bool {
        let value = value.as_nanos() as f64;
        (value - truth).abs() <= truth / 1_000.0
    }

    #[test]
    fn percentiles_of_a_uniform_millisecond_spread_are_within_a_thousandth() {
        let mut h = Histogram::new();
        for us in 1..=10_000u64 {
            h.record(Duration::from_micros(us));
        }
        assert!(within(h.quantile(0.50).unwrap(), 5_000_000.0), "{:?}", h.quantile(0.5));
        assert!(within(h.quantile(0.99).unwrap(), 9_900_000.0), "{:?}", h.quantile(0.99));
        assert!(within(h.mean().unwrap(), 5_000_500.0), "{:?}", h.mean());
        assert_eq!(h.max(), Some(Duration::from_millis(10)));
        assert_eq!(h.count(), 10_000);
    }

    #[test]
    fn a_percentile_never_exceeds_the_exact_maximum() {
        let mut h = Histogram::new();
        h.record_nanos(1_000_001);
        assert_eq!(h.quantile(0.99), Some(Duration::from_nanos(1_000_001)));
    }

    #[test]
    fn merging_two_workers_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in 0..1_000u64 {
            let nanos = v * v * 37;
            if v % 3 == 0 { &mut a } else { &mut b }.record_nanos(nanos);
            all.record_nanos(nanos);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(a.quantile(q), all.quantile(q), "quantile {q}");
        }
        assert_eq!(a.max(), all.max());
    }

    #[test]
    fn correction_adds_the_requests_a_stall_held_back() {
        // 99 requests of 1 ms and one stall of 100 ms, the worker meaning to send one every
        // 1 ms: uncorrected the stall is one value in a hundred, so p99 is 1 ms; corrected,
        // it held back 99 requests that would have waited 99, 98 ... 1 ms.
        let mut h = Histogram::new();
        for _ in 0..99 {
            h.record(Duration::from_millis(1));
        }
        h.record(Duration::from_millis(100));
        assert!(within(h.quantile(0.99).unwrap(), 1_000_000.0), "{:?}", h.quantile(0.99));
        let corrected = h.corrected(Duration::from_millis(1));
        assert_eq!(corrected.count(), 199);
        let p75 = corrected.quantile(0.75).unwrap();
        assert!(
            (Duration::from_millis(49)..=Duration::from_millis(52)).contains(&p75),
            "{p75:?}"
        );
        assert!(corrected.quantile(0.99).unwrap() > Duration::from_millis(90));
        assert_eq!(corrected.max(), h.max());
        assert_eq!(h.corrected(Duration::ZERO).count(), 100, "no interval, no correction");
    }

    #[test]
    fn an_empty_histogram_has_no_percentiles() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.max(), None);
        assert_eq!(h.mean(), None);
        assert_eq!(h.corrected(Duration::from_millis(1)).count(), 0);
    }
}
