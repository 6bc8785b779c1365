//! `muster`: the server and the command-line client in one binary (DESIGN "Interfaces").
//! Wiring only: argv, logging (`muster_cli::logging`), the runtime, and the error → exit code mapping; everything
//! else is in the `muster_cli` library.

// Denied, not forbidden: `main`'s first statement sets the allocator's option (below).
#![deny(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use muster_cli::cli::{Cli, Command};

/// mimalloc instead of glibc's malloc: a profile of a 3-node cluster under registrations
/// showed about a sixth of the leader's CPU in glibc's allocator (`_int_malloc`,
/// `malloc_consolidate`, `_int_free`), where a request's short-lived buffers and parsed
/// values churn through small allocations on both worker threads.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long `serve` lets the runtime's remaining tasks finish after the server returned:
/// the server has already stopped gracefully by then, so this only bounds stragglers.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    // SAFETY: the first statement of `main`: no other thread exists yet.
    #[allow(unsafe_code)]
    unsafe {
        muster_cli::allocator::purge_at_once();
    }
    // Usage errors exit 2 here, and --help / --version exit 0.
    let cli = Cli::parse_exact();
    // The server and the load generator need every core, and so does the lab's live server;
    // a client command needs one.
    let serving = matches!(cli.command, Command::Serve(_) | Command::Bench(_) | Command::Proxy(_));
    let json = cli.json;
    let runtime = if serving || matches!(cli.command, Command::Lab(_)) {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: runtime: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP exporter (feature `otel`) starts its channel's task there.
    let logging = {
        let _entered = runtime.enter();
        muster_cli::logging::init(&cli.log, serving)
    };
    let logging = match logging {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("error: usage: {err}");
            return ExitCode::from(2);
        }
    };
    let mut stdout = std::io::stdout();
    let result = runtime.block_on(muster_cli::commands::run(cli, &mut stdout));
    // Flushes the spans still queued (feature `otel`) while the runtime still runs.
    logging.flush();
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}: {err}", err.code());
            if json && let Ok(body) = serde_json::to_string(&err.to_body()) {
                println!("{body}");
            }
            ExitCode::from(err.exit_code())
        }
    }
}
