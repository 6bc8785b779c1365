//! CPU used during a measured phase by the system under test and by the load generator,
//! from `/proc/PID/stat` and `/proc/self/stat`. Both share this machine's cores, so a figure
//! is only interpretable with who was busy next to it.

use std::time::Instant;

use crate::clock::now;
use crate::codec::parse_cpu_seconds;
use crate::report::SystemResult;

/// The CPU seconds (user + system) of the process whose `stat` file is at `path`.
pub(crate) fn cpu_seconds(path: &str) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|stat| parse_cpu_seconds(&stat))
}

/// CPU readings at the start of a phase.
pub(crate) struct CpuMeter {
    server: Option<(String, f64)>,
    client: Option<f64>,
    start: Instant,
}

impl CpuMeter {
    /// Reads both processes' CPU time now (`pid`: the system under test, if known).
    pub(crate) fn start(pid: Option<u32>) -> CpuMeter {
        let server = pid.and_then(|pid| {
            let path = format!("/proc/{pid}/stat");
            cpu_seconds(&path).map(|seconds| (path, seconds))
        });
        CpuMeter {
            server,
            client: cpu_seconds("/proc/self/stat"),
            start: now(),
        }
    }

    /// The server's CPU seconds since the start, if its PID is known.
    pub(crate) fn server_seconds(&self) -> Option<f64> {
        let (path, before) = self.server.as_ref()?;
        Some(cpu_seconds(path)? - before)
    }

    /// Fills `result`'s CPU figures, in cores over the phase.
    pub(crate) fn finish(&self, result: &mut SystemResult) {
        let wall = (now() - self.start).as_secs_f64();
        if wall <= 0.0 {
            return;
        }
        result.server_cores = self
            .server
            .as_ref()
            .and_then(|(path, before)| Some((cpu_seconds(path)? - before) / wall));
        result.client_cores = self
            .client
            .and_then(|before| Some((cpu_seconds("/proc/self/stat")? - before) / wall));
    }
}
