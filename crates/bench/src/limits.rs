//! The descriptor limit: every watch stream, ADS stream or client connection the bench opens
//! costs one descriptor here and one in the server under test.
//!
//! The soft limit is raised to the hard one (as Go's runtime does). When a workload needs more
//! than the hard limit allows (the convergence workload's 10,000 clients hold 20,000
//! connections, and a common hard limit is 20,000), the hard limit is raised too, which only a
//! process with `CAP_SYS_RESOURCE` may do; otherwise the hard limit is what the run gets. A
//! `muster serve` started after this (`--spawn`) inherits the raised limits.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raises the descriptor limit to at least `wanted` if allowed, else to the hard limit, and
/// returns the soft limit now in force (`None`: unlimited).
pub(crate) fn raise_descriptor_limit(wanted: u64) -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    let hard = limit.maximum;
    if hard.is_some_and(|hard| hard < wanted) {
        let raised = Rlimit {
            current: Some(wanted),
            maximum: Some(wanted),
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return getrlimit(Resource::Nofile).current;
        }
    }
    if limit.current != hard {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: hard,
                maximum: hard,
            },
        );
    }
    getrlimit(Resource::Nofile).current
}
