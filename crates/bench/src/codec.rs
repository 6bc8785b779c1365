//! Small pure codecs: base64 for etcd's JSON gateway, the few fields the bench reads from
//! Muster watch frames and etcd gateway replies, and `VmRSS` from `/proc/PID/status`.

use serde::{Deserialize, Deserializer};

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 §4), as etcd's gateway expects for `bytes` fields.
pub(crate) fn base64(input: &[u8]) -> String {
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The end of etcd's range over every key starting with `prefix`: the prefix with its last
/// byte incremented (etcd's `clientv3.GetPrefixRangeEnd`).
pub(crate) fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only 0xff bytes: every key from the prefix on ("\0" means "to the end" to etcd).
    vec![0]
}

/// The head of a Muster watch frame: its `type` and, where it has one, its `revision`.
/// Everything else in the frame is ignored (replies may grow fields; see `muster_core::api`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct FrameHead {
    /// `snapshot`, `update`, `progress`, `error`, `resync` or `closing`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// The frame's revision.
    #[serde(default)]
    pub(crate) revision: Option<u64>,
}

/// etcd's gateway renders int64 as JSON strings (`"revision":"3"`); accept numbers too.
fn flexible_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flexible {
        Number(u64),
        Text(String),
    }
    match Flexible::deserialize(deserializer)? {
        Flexible::Number(n) => Ok(n),
        Flexible::Text(text) => text.parse().map_err(serde::de::Error::custom),
    }
}

/// A response header of etcd's gateway.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct EtcdHeader {
    /// The store's revision when the reply was made.
    #[serde(deserialize_with = "flexible_u64", default)]
    pub(crate) revision: u64,
}

/// `POST /v3/kv/put` and `/v3/kv/range` replies: only the header.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct EtcdReply {
    /// The header.
    pub(crate) header: EtcdHeader,
}

/// `POST /v3/lease/grant`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct EtcdGrant {
    /// The lease id.
    #[serde(rename = "ID", deserialize_with = "flexible_u64")]
    pub(crate) id: u64,
}

/// One line of a gateway stream (`/v3/watch`, `/v3/lease/keepalive`): a result or an error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct EtcdStreamLine {
    /// The message.
    #[serde(default)]
    pub(crate) result: Option<EtcdStreamResult>,
    /// A gRPC error, as the gateway renders it.
    #[serde(default)]
    pub(crate) error: Option<serde_json::Value>,
}

/// The part of a stream message the bench reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct EtcdStreamResult {
    /// The header.
    #[serde(default)]
    pub(crate) header: Option<EtcdHeader>,
    /// Watch: the creation acknowledgement.
    #[serde(default)]
    pub(crate) created: bool,
    /// Watch: the events (only counted).
    #[serde(default)]
    pub(crate) events: Vec<serde::de::IgnoredAny>,
    /// Keepalive: the TTL left; absent (zero) when the lease does not exist.
    #[serde(rename = "TTL", default, deserialize_with = "flexible_u64")]
    pub(crate) ttl: u64,
}

/// Splits a byte stream into newline-terminated lines (NDJSON watch frames, gateway stream
/// messages), whatever the chunking: a line may span chunks, a chunk may hold many lines.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// Feeds `chunk`; calls `each` with every line it completes (without the newline; blank
    /// lines skipped) and stops at the first error.
    pub(crate) fn push<E>(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = (&rest[..end], &rest[end + 1..]);
            rest = tail;
            let line: &[u8] = if self.pending.is_empty() {
                head
            } else {
                self.pending.extend_from_slice(head);
                &self.pending
            };
            if !line.iter().all(u8::is_ascii_whitespace) {
                each(line)?;
            }
            self.pending.clear();
        }
        self.pending.extend_from_slice(rest);
        Ok(())
    }
}

/// Clock ticks per second of `/proc/PID/stat` times: `USER_HZ`, which is 100 on every Linux
/// architecture's ABI (what `sysconf(_SC_CLK_TCK)` returns), so no libc call is needed.
const USER_HZ: f64 = 100.0;

/// User plus system CPU time, in seconds, of a `/proc/PID/stat` text.
pub(crate) fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The 1-minute load average of a `/proc/loadavg` text.
pub(crate) fn parse_load_average(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// `VmRSS` of a `/proc/PID/status` text, in bytes.
pub(crate) fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => Some(value * 1024),
        _ => None,
    }
}

/// The sum of the samples of `name` in a Prometheus text page whose labels include every
/// pair of `labels`; `None` when no sample matches.
pub(crate) fn parse_metric(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => match rest.split_once('}') {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        let present: Vec<(&str, &str)> = label_text
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.trim(), value.trim().trim_matches('"')))
            .collect();
        if !labels.iter().all(|wanted| present.contains(wanted)) {
            continue;
        }
        if let Some(value) = value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use muster_core::api::Frame;
    use muster_core::{Revision, ServiceKey, ServiceUpdate};

    use super::*;

    #[test]
    fn base64_matches_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn a_prefix_range_ends_after_its_last_byte() {
        assert_eq!(prefix_range_end(b"/a/"), b"/a0");
        assert_eq!(prefix_range_end(b"a\xff"), b"b");
        assert_eq!(prefix_range_end(b"\xff"), b"\0");
    }

    #[test]
    fn the_frame_head_reads_the_revision_of_a_contract_update_frame() {
        let update = Frame::Update(ServiceUpdate {
            key: ServiceKey::new("acme", "prod", "api").unwrap(),
            revision: Revision(42),
            prev_revision: Revision(41),
            digest: Default::default(),
            events: vec![],
        });
        let line = serde_json::to_string(&update).unwrap();
        let head: FrameHead = serde_json::from_str(&line).unwrap();
        assert_eq!(
            head,
            FrameHead {
                kind: "update".into(),
                revision: Some(42)
            }
        );
        let progress = serde_json::to_string(&Frame::Progress { revision: Revision(7) }).unwrap();
        let head: FrameHead = serde_json::from_str(&progress).unwrap();
        assert_eq!((head.kind.as_str(), head.revision), ("progress", Some(7)));
    }

    #[test]
    fn etcd_gateway_lines_parse_as_captured_from_etcd_3_4() {
        // Captured with curl from etcd 3.4.23's gateway.
        let created = r#"{"result":{"header":{"cluster_id":"3249","member_id":"3319","revision":"2","raft_term":"2"},"created":true}}"#;
        let event = r#"{"result":{"header":{"revision":"3","raft_term":"2"},"events":[{"kv":{"key":"Zm9v","mod_revision":"3","value":"YmF6"}}]}}"#;
        let keepalive = r#"{"result":{"header":{"revision":"2"},"ID":"2324035713480083718","TTL":"60"}}"#;
        let unknown_lease = r#"{"result":{"header":{"revision":"2"},"ID":"99"}}"#;
        let line = |text: &str| serde_json::from_str::<EtcdStreamLine>(text).unwrap().result.unwrap();
        assert!(line(created).created);
        let event = line(event);
        assert_eq!((event.header.unwrap().revision, event.events.len()), (3, 1));
        assert_eq!(line(keepalive).ttl, 60);
        assert_eq!(line(unknown_lease).ttl, 0, "an unknown lease has no TTL");
        let grant: EtcdGrant = serde_json::from_str(r#"{"header":{},"ID":"2324035713480083718","TTL":"60"}"#).unwrap();
        assert_eq!(grant.id, 2_324_035_713_480_083_718);
        let put: EtcdReply = serde_json::from_str(r#"{"header":{"revision":"2","raft_term":"2"}}"#).unwrap();
        assert_eq!(put.header.revision, 2);
    }

    fn lines_of(chunks: &[&str]) -> Vec<String> {
        let mut lines = Lines::default();
        let mut seen = Vec::new();
        for chunk in chunks {
            lines
                .push(chunk.as_bytes(), |line| {
                    seen.push(String::from_utf8(line.to_vec()).unwrap());
                    Ok::<(), ()>(())
                })
                .unwrap();
        }
        seen
    }

    #[test]
    fn lines_are_whole_whatever_the_chunking() {
        assert_eq!(lines_of(&["{\"a\":1}\n{\"b\":2}\n"]), ["{\"a\":1}", "{\"b\":2}"]);
        assert_eq!(
            lines_of(&["{\"a\"", ":1}\n{\"b", "\":2}", "\n"]),
            ["{\"a\":1}", "{\"b\":2}"]
        );
        assert_eq!(
            lines_of(&["\n", "  \n", "x"]),
            Vec::<String>::new(),
            "blank and unfinished lines are not lines"
        );
    }

    #[test]
    fn a_line_error_stops_the_feed() {
        let mut lines = Lines::default();
        let mut count = 0;
        let result = lines.push(b"a\nb\nc\n", |line| {
            count += 1;
            if line == b"b" { Err("bad line") } else { Ok(()) }
        });
        assert_eq!((result, count), (Err("bad line"), 2));
    }

    #[test]
    fn cpu_time_is_user_plus_system_even_with_spaces_in_the_name() {
        let stat = "4242 (muster (x) y) S 1 4242 4242 0 -1 4194560 1790 0 0 0 250 37 0 0 20 0 6 0 1000 0";
        assert_eq!(parse_cpu_seconds(stat), Some(2.87));
        assert_eq!(parse_cpu_seconds("4242 (x) S 1"), None);
    }

    #[test]
    fn the_load_average_is_the_first_figure() {
        assert_eq!(parse_load_average("1.65 2.46 2.04 3/412 11204\n"), Some(1.65));
        assert_eq!(parse_load_average(""), None);
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tmuster\nVmPeak:\t  900000 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(12_345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None, "kernel threads have no VmRSS");
    }

    #[test]
    fn a_metric_is_found_by_name_and_labels() {
        let page = "# HELP muster_blocking_queries_total x\n\
                    muster_blocking_queries_total{api=\"consul\",outcome=\"changed\"} 7\n\
                    muster_blocking_queries_total{api=\"native\",outcome=\"changed\"} 3\n\
                    muster_blocking_queries_waiting{api=\"consul\"} 1000\n\
                    muster_up 1\n";
        let consul = [("api", "consul"), ("outcome", "changed")];
        assert_eq!(parse_metric(page, "muster_blocking_queries_total", &consul), Some(7.0));
        assert_eq!(
            parse_metric(page, "muster_blocking_queries_total", &[("outcome", "changed")]),
            Some(10.0)
        );
        assert_eq!(
            parse_metric(page, "muster_blocking_queries_waiting", &[("api", "consul")]),
            Some(1000.0)
        );
        assert_eq!(parse_metric(page, "muster_up", &[]), Some(1.0));
        assert_eq!(parse_metric(page, "muster_blocking_queries", &[]), None);
        assert_eq!(
            parse_metric(page, "muster_blocking_queries_total", &[("api", "grpc")]),
            None
        );
    }
}
