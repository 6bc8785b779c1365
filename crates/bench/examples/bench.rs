//! `muster bench` without the CLI: the same flags, for running the driver before (or apart
//! from) the `muster` binary. With `--spawn`, pass `--muster-bin` (this example is not muster).
//!
//! `cargo run --release -p muster-bench --example bench -- --spawn --muster-bin target/release/muster --spawn-etcd`

use clap::Parser;

/// The bench's flags, plus `--json`.
#[derive(Debug, Parser)]
struct Cli {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    bench: muster_bench::BenchArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match muster_bench::run(cli.bench).await {
        Ok(report) => {
            print!(
                "{}",
                if cli.json {
                    report.render_json()
                } else {
                    report.render_table()
                }
            );
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {}: {err}", err.code());
            std::process::ExitCode::from(2)
        }
    }
}
