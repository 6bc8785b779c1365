//! Shared test and benchmark support (dev-only): the endpoint record the memory and speed
//! budgets are stated for, a counting allocator to measure live heap bytes, and test
//! certificates ([`pki`]), and (feature `server`) a registry started in-process for tests
//! (`server`).
//!
//! This is the workspace's one crate that allows `unsafe` code: implementing `GlobalAlloc`
//! requires it. Benchmarks install the allocator with
//! `#[global_allocator] static ALLOCATOR: Counting = Counting;` (no unsafe on their side).

#![allow(unsafe_code)]

pub mod pki;
#[cfg(feature = "server")]
pub mod server;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use muster_core::{
    Actor, AddressSpec, EndpointSpec, Incarnation, InstanceId, PortSpec, Principal, Protocol, ServiceKey,
};
use muster_registry::{Command, CommandMeta, LeaseSpec, Register, Target};

/// The system allocator, counting the bytes currently allocated.
#[derive(Debug)]
pub struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes currently allocated through [`Counting`] (0 unless it is the global allocator).
pub fn live_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter is only arithmetic on the sizes passed through.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with this layout (we forwarded it there).
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from an earlier allocation.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        new
    }
}

/// Who the benchmarks' commands come from.
pub fn meta() -> CommandMeta {
    CommandMeta {
        at_ms: 0,
        principal: Principal::new("bench").expect("a valid principal"),
        actor: Actor::App,
    }
}

/// Registration `n` of instance `pod` into `key`: one IPv4 address, ports `http` and `grpc`,
/// four labels (`team`, `version`, `zone` and the instance-specific `pod`), as SPEC M, L, W states
/// the memory budget's record.
pub fn register(key: &ServiceKey, pod: &str, n: u32, weight: u32, lease: LeaseSpec) -> Command {
    let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
    let labels = BTreeMap::from([
        ("team".to_owned(), "core".to_owned()),
        ("version".to_owned(), "v1.2.3".to_owned()),
        ("zone".to_owned(), zones[n as usize % zones.len()].to_owned()),
        ("pod".to_owned(), pod.to_owned()),
    ]);
    let spec = EndpointSpec {
        addresses: vec![AddressSpec {
            ip: format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff),
            scope: None,
        }],
        ports: vec![
            PortSpec {
                name: "http".into(),
                port: 8080,
                protocol: Protocol::Http,
            },
            PortSpec {
                name: "grpc".into(),
                port: 9090,
                protocol: Protocol::Grpc,
            },
        ],
        weight: Some(weight),
        labels,
        ..EndpointSpec::default()
    };
    Command::Register(Register {
        target: Target {
            key: key.clone(),
            instance: InstanceId::new(pod).expect("a valid instance id"),
            incarnation: Incarnation(1),
        },
        spec,
        lease,
        expected_revision: None,
    })
}

/// A free loopback TCP port below the kernel's ephemeral range (32768 and up), for addresses
/// a test must know before its servers bind them (cluster members): no `:0` bind of a
/// parallel test can take it in between. Spread by process id so test binaries differ.
pub fn fixed_tcp_port() -> u16 {
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let offset = std::process::id() % 600 * 20 + NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (offset % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
