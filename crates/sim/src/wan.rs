//! The link between two simulated regions: what the mirror's watch of the peer region
//! travels over. It is cut (every link between the regions down: a region partition) or
//! healed by the federation schedule, and has its own weather (loss, delay), drawn from its
//! own stream of the seed.
//!
//! ```text
//!  region b's leader ──(cut? lost?)──delay──▶ region a's node: read ──(cut? lost?)──delay──▶ back
//! ```
//!
//! The read happens on arrival, so what it returns is the peer's state at that moment, and
//! a reply lost on the way back is a read whose answer nobody used (a watch that broke).

use std::sync::Mutex;
use std::time::Duration;

use crate::rng::SimRng;

/// The WAN's weather.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WanWeather {
    /// Messages lost, per thousand (each way).
    pub loss: u64,
    /// Shortest and longest one-way delay, ms.
    pub delay_ms: (u64, u64),
}

impl WanWeather {
    /// A healthy WAN: 10–40 ms one way (regions are far apart), nothing lost.
    pub const CALM: WanWeather = WanWeather {
        loss: 0,
        delay_ms: (10, 40),
    };
}

/// Counts for the report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WanStats {
    /// Exchanges attempted.
    pub sent: u64,
    /// Exchanges lost (cut or weather).
    pub lost: u64,
}

struct WanState {
    cut: bool,
    weather: WanWeather,
    rng: SimRng,
    stats: WanStats,
}

/// The link between the regions.
pub struct Wan {
    state: Mutex<WanState>,
}

/// The exchange did not complete: the request or its reply was lost, or the link was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("simulated WAN: the exchange between the regions was lost")]
pub struct WanLost;

impl Wan {
    /// A healthy link.
    pub fn new(rng: SimRng) -> Wan {
        Wan {
            state: Mutex::new(WanState {
                cut: false,
                weather: WanWeather::CALM,
                rng,
                stats: WanStats::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WanState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Cuts (true) or heals (false) every link between the regions.
    pub fn set_cut(&self, cut: bool) {
        self.state().cut = cut;
    }

    /// Whether the regions are partitioned now.
    pub fn is_cut(&self) -> bool {
        self.state().cut
    }

    /// Sets the weather.
    pub fn set_weather(&self, weather: WanWeather) {
        self.state().weather = weather;
    }

    /// The counts so far.
    pub fn stats(&self) -> WanStats {
        self.state().stats
    }

    /// The delay of one leg, and whether it is lost (by weather; a cut is judged on arrival).
    fn leg(&self) -> (u64, bool) {
        let mut state = self.state();
        let WanWeather { loss, delay_ms } = state.weather;
        let delay = state.rng.between(delay_ms.0, delay_ms.1);
        (delay, state.rng.chance(loss))
    }

    /// Carries a request to the other region, runs `handle` there on arrival (`None`: no
    /// node answers at that address), and carries its answer back.
    pub async fn exchange<T>(&self, handle: impl FnOnce() -> Option<T>) -> Result<T, WanLost> {
        self.state().stats.sent += 1;
        let (there, request_lost) = self.leg();
        tokio::time::sleep(Duration::from_millis(there)).await;
        if request_lost || self.is_cut() {
            return Err(self.lost());
        }
        let Some(answer) = handle() else {
            return Err(self.lost());
        };
        let (back, reply_lost) = self.leg();
        tokio::time::sleep(Duration::from_millis(back)).await;
        if reply_lost || self.is_cut() {
            return Err(self.lost());
        }
        Ok(answer)
    }

    fn lost(&self) -> WanLost {
        self.state().stats.lost += 1;
        WanLost
    }
}
