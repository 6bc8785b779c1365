//! Protocol detection for `auto` listeners (SPEC D3), as linkerd2-proxy does it: the HTTP/2
//! connection preface, or an HTTP/1 request line's method, in the client's first bytes; anything
//! else, or silence past the detect timeout (a server-first protocol), is opaque TCP. The
//! bytes are peeked, not read, so whichever path takes the connection sees all of them.

use std::time::Duration;

use tokio::net::TcpStream;

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Request methods an HTTP/1 client starts with, each followed by a space.
const H1_METHODS: [&[u8]; 9] = [
    b"GET ",
    b"POST ",
    b"PUT ",
    b"DELETE ",
    b"HEAD ",
    b"OPTIONS ",
    b"PATCH ",
    b"TRACE ",
    b"CONNECT ",
];

/// What a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detected {
    /// HTTP/1.x or HTTP/2: served by the HTTP path (which tells the two apart itself).
    Http,
    /// Anything else.
    Tcp,
}

/// Classifies the first bytes: `None` while they are a prefix of something HTTP and more
/// may come.
pub fn classify(first: &[u8]) -> Option<Detected> {
    if first.is_empty() {
        return None;
    }
    let prefix_of = |whole: &[u8]| first.len() < whole.len() && whole.starts_with(first);
    if first.starts_with(H2_PREFACE) || H1_METHODS.iter().any(|method| first.starts_with(method)) {
        return Some(Detected::Http);
    }
    if prefix_of(H2_PREFACE) || H1_METHODS.iter().any(|method| prefix_of(method)) {
        return None;
    }
    Some(Detected::Tcp)
}

/// Peeks at `stream` until its first bytes decide, the client closes, or `timeout` passes.
pub async fn detect(stream: &TcpStream, timeout: Duration) -> Detected {
    let mut buf = [0u8; H2_PREFACE.len()];
    let peek = async {
        loop {
            match stream.peek(&mut buf).await {
                Ok(0) | Err(_) => return Detected::Tcp,
                Ok(n) => {
                    if let Some(detected) = classify(&buf[..n]) {
                        return detected;
                    }
                    // A prefix arrived alone; peeking again at once would return the same
                    // bytes, so give the rest a moment to arrive.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    };
    tokio::time::timeout(timeout, peek).await.unwrap_or(Detected::Tcp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_is_told_from_tcp_by_its_first_bytes() {
        assert_eq!(classify(b"GET / HTTP/1.1\r\n"), Some(Detected::Http));
        assert_eq!(classify(b"POST /x HTTP/1.1"), Some(Detected::Http));
        assert_eq!(classify(H2_PREFACE), Some(Detected::Http));
        assert_eq!(classify(b"\x16\x03\x01"), Some(Detected::Tcp), "a TLS client hello");
        assert_eq!(classify(b"SSH-2.0-OpenSSH"), Some(Detected::Tcp));
        assert_eq!(classify(b"GETX"), Some(Detected::Tcp));
        assert_eq!(
            classify(b"get / HTTP/1.1"),
            Some(Detected::Tcp),
            "methods are case-sensitive"
        );
    }

    #[test]
    fn a_prefix_of_something_http_waits_for_more() {
        assert_eq!(classify(b""), None);
        assert_eq!(classify(b"GE"), None);
        assert_eq!(classify(b"PRI * HTTP/2"), None);
        assert_eq!(classify(b"P"), None, "PRI, POST, PUT, PATCH");
    }

    #[tokio::test]
    async fn a_silent_client_is_tcp_after_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("addr");
        let _client = TcpStream::connect(addr).await.expect("connects");
        let (server_side, _) = listener.accept().await.expect("accepts");
        assert_eq!(detect(&server_side, Duration::from_millis(50)).await, Detected::Tcp);
    }
}
