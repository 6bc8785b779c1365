//! A real resolver pointed at one test server. Shared with muster-server's DNS tests, which
//! include this file by path.

use std::net::SocketAddr;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};

/// A resolver that asks only `server`, over UDP then TCP (after a truncated answer), caching
/// nothing so that every lookup is a query, with 0x20 case randomisation on so that it checks
/// the question's echo too.
pub(crate) fn resolver(server: SocketAddr, edns: bool) -> TokioResolver {
    resolver_over(server, NameServerConfig::udp_and_tcp(server.ip()), edns)
}

/// The same resolver over the transports of `name_server` only (its port set to `server`'s).
pub(crate) fn resolver_over(server: SocketAddr, mut name_server: NameServerConfig, edns: bool) -> TokioResolver {
    for connection in &mut name_server.connections {
        connection.port = server.port();
    }
    let mut options = ResolverOpts::default();
    options.cache_size = 0;
    options.edns0 = edns;
    options.case_randomization = true;
    options.attempts = 1;
    Resolver::builder_with_config(
        ResolverConfig::from_parts(None, Vec::new(), vec![name_server]),
        TokioRuntimeProvider::default(),
    )
    .with_options(options)
    .build()
    .unwrap()
}
