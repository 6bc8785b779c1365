//! `muster-sim`: runs the deterministic cluster simulation for a range of seeds.
//!
//! ```text
//! cargo run --release -p muster-sim -- --seeds 1-200
//! seed=1 result=ok trace=3f0c9a2b7d41e856
//! ...
//! cargo run --release -p muster-sim -- --seeds 1-200 --regions 2
//! seed=1 result=ok trace=… mirror=41/12/3/5 partitions=2/1 trespasses=9
//! ```
//!
//! With `--regions 2` each line also says what the mirror did: commits with a change /
//! progress-only commits / fresh snapshots / broken watches, region partitions / those
//! judged on local commits, and local writes in b to mirrored instances.
//!
//! A failure prints the broken invariant and the command that replays it; the exit code is
//! non-zero if any seed failed.

use std::process::ExitCode;

use clap::Parser;
use muster_sim::{Options, run_seed};

/// Runs the deterministic cluster simulation.
#[derive(Parser, Debug)]
#[command(name = "muster-sim")]
struct Args {
    /// Seeds to run: `N` or `FIRST-LAST`.
    #[arg(long, default_value = "1-20")]
    seeds: String,
    /// Print every step of the trace.
    #[arg(long)]
    verbose: bool,
    /// Print a summary line with simulated steps per second.
    #[arg(long)]
    stats: bool,
    /// Cluster size (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Steps per seed.
    #[arg(long, default_value_t = Options::default().steps)]
    steps: u64,
    /// Regions (1 or 2): with 2, region b mirrors region a's `prod/*` (SPEC G2).
    #[arg(long, default_value_t = 1)]
    regions: u64,
    /// Only the faults the first traces were found with (no lost and regained leadership,
    /// no slow node, appends paced at the real byte bound): replays a trace found before
    /// those faults existed
    #[arg(long)]
    shallow: bool,
    /// Start node 1 on this data directory (one an older build wrote, e.g.
    /// `crates/consensus/tests/golden/v1/data`, read but never written) and grow a 3-node
    /// cluster from it before the schedule plays
    #[arg(long, value_name = "DIR")]
    from_data_dir: Option<std::path::PathBuf>,
}

fn parse_seeds(text: &str) -> Result<std::ops::RangeInclusive<u64>, String> {
    let bad = || format!("--seeds takes N or FIRST-LAST, not {text:?}");
    match text.split_once('-') {
        None => {
            let seed = text.trim().parse().map_err(|_| bad())?;
            Ok(seed..=seed)
        }
        Some((first, last)) => {
            let first: u64 = first.trim().parse().map_err(|_| bad())?;
            let last: u64 = last.trim().parse().map_err(|_| bad())?;
            if first > last {
                return Err(bad());
            }
            Ok(first..=last)
        }
    }
}

/// The federation part of a seed's line (empty with one region).
fn federation(report: &muster_sim::Report) -> String {
    let Some(f) = &report.federation else {
        return String::new();
    };
    format!(
        " mirror={}/{}/{}/{} partitions={}/{} trespasses={} mirrored_sets={}",
        f.mirror.changes,
        f.mirror.progress,
        f.mirror.resnapshots,
        f.mirror.failures,
        f.partitions,
        f.judged,
        f.trespasses,
        f.mirrored_sets
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seeds = match parse_seeds(&args.seeds) {
        Ok(seeds) => seeds,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if args.nodes != 3 && args.nodes != 5 {
        eprintln!("--nodes takes 3 or 5");
        return ExitCode::from(2);
    }
    if args.regions != 1 && args.regions != 2 {
        eprintln!("--regions takes 1 or 2");
        return ExitCode::from(2);
    }
    let options = Options {
        nodes: args.nodes,
        steps: args.steps,
        verbose: args.verbose,
        regions: args.regions,
        shallow: args.shallow,
    };
    // The binary's wiring measures its own wall time for the statistics line; nothing the
    // simulation decides reads it.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let (mut failed, mut steps, mut simulated_ms, mut seeds_run) = (0_u64, 0_u64, 0_u64, 0_u64);
    let (mut paced, mut faults) = (0_u64, muster_sim::FaultCounts::default());
    for seed in seeds {
        let report = match &args.from_data_dir {
            None => run_seed(seed, &options),
            Some(dir) => match muster_consensus::SimDisk::from_data_dir(dir) {
                Ok(disk) => muster_sim::run_seed_from(seed, &options, disk),
                Err(error) => {
                    eprintln!("--from-data-dir {}: {error}", dir.display());
                    return ExitCode::from(2);
                }
            },
        };
        seeds_run += 1;
        steps += report.steps;
        simulated_ms += report.simulated_ms;
        paced += report.net.paced;
        faults += report.faults;
        match &report.violation {
            None => println!(
                "seed={seed} result=ok trace={:016x}{}",
                report.trace,
                federation(&report)
            ),
            Some(violation) => {
                failed += 1;
                println!("seed={seed} result=fail trace={:016x}", report.trace);
                println!("  invariant: {}", violation.invariant);
                println!("  detail: {}", violation.detail);
                let mut nodes = if args.nodes == 3 {
                    String::new()
                } else {
                    format!(" --nodes {}", args.nodes)
                };
                if args.regions == 2 {
                    nodes.push_str(" --regions 2");
                }
                if args.shallow {
                    nodes.push_str(" --shallow");
                }
                if let Some(dir) = &args.from_data_dir {
                    nodes.push_str(&format!(" --from-data-dir {}", dir.display()));
                }
                println!("  replay: cargo run --release -p muster-sim -- --seeds {seed}{nodes} --verbose");
            }
        }
    }
    if args.stats {
        let wall = started.elapsed().as_secs_f64();
        println!(
            "stats: seeds={seeds_run} failed={failed} steps={steps} simulated_s={:.1} wall_s={wall:.1} steps_per_s={:.0} simulated_x={:.1} paced_appends={paced} supervisor_restarts={} deposed={} regained={} slowed={}",
            simulated_ms as f64 / 1000.0,
            steps as f64 / wall.max(1e-9),
            simulated_ms as f64 / 1000.0 / wall.max(1e-9),
            faults.supervised,
            faults.deposed,
            faults.regained,
            faults.slowed,
        );
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
