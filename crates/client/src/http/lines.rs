//! [`LineSplitter`]: the pure half of a watch, a byte stream cut into newline-terminated
//! lines whatever the chunking, with a bound on an unfinished line.

/// The longest line accepted: one snapshot frame carries a whole service, and at the
/// registry's default quota (50,000 endpoints a service) of records at the 4 KiB record
/// limit that is about 200 MiB of JSON. A smaller bound would refuse a legal service's
/// snapshot on every reconnect, forever; 256 MiB admits it and still bounds memory if a
/// server (or something posing as one) never sends a newline.
pub(crate) const MAX_LINE_BYTES: usize = 256 * 1024 * 1024;

/// Splits a byte stream into newline-terminated lines, skipping blank ones.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline, so a long line is scanned once.
    scanned: usize,
    /// Length of the unfinished line at the end of `buf`.
    tail: usize,
    max_line: usize,
}

impl LineSplitter {
    /// A splitter refusing lines longer than `max_line` bytes.
    pub(crate) fn new(max_line: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            scanned: 0,
            tail: 0,
            max_line,
        }
    }

    /// Appends a chunk. Fails when an unfinished line grows past the limit.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.tail = match chunk.iter().rposition(|b| *b == b'\n') {
            Some(last) => chunk.len() - last - 1,
            None => self.tail + chunk.len(),
        };
        if self.tail > self.max_line {
            return Err(format!("a frame is longer than {} bytes", self.max_line));
        }
        self.buf.extend_from_slice(chunk);
        Ok(())
    }

    /// The next complete, non-blank line, without its newline (and `\r`).
    pub(crate) fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') else {
                self.scanned = self.buf.len();
                return None;
            };
            let mut line: Vec<u8> = self.buf.drain(..=self.scanned + at).collect();
            self.scanned = 0;
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Some(line);
            }
        }
    }

    /// What is left after the stream ended: a last line without a newline, if any.
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        self.scanned = 0;
        self.tail = 0;
        let rest = std::mem::take(&mut self.buf);
        (!rest.iter().all(u8::is_ascii_whitespace)).then_some(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(splitter: &mut LineSplitter) -> Vec<String> {
        std::iter::from_fn(|| splitter.next_line())
            .map(|line| String::from_utf8(line).unwrap())
            .collect()
    }

    #[test]
    fn lines_split_across_and_within_chunks_come_out_whole() {
        let mut splitter = LineSplitter::new(1024);
        splitter.push(b"{\"a\":1}\n{\"b\"").unwrap();
        assert_eq!(drain(&mut splitter), ["{\"a\":1}"]);
        splitter.push(b":2}\n\n\r\n{\"c\":3}\r\n{\"d\"").unwrap();
        assert_eq!(drain(&mut splitter), ["{\"b\":2}", "{\"c\":3}"]);
        splitter.push(b":4}").unwrap();
        assert_eq!(drain(&mut splitter), Vec::<String>::new());
        assert_eq!(splitter.finish(), Some(b"{\"d\":4}".to_vec()));
        assert_eq!(splitter.finish(), None);
    }

    #[test]
    fn byte_at_a_time_delivery_gives_the_same_lines() {
        let mut splitter = LineSplitter::new(1024);
        let mut lines = Vec::new();
        for byte in b"one\ntwo\nthree\n" {
            splitter.push(&[*byte]).unwrap();
            lines.extend(drain(&mut splitter));
        }
        assert_eq!(lines, ["one", "two", "three"]);
    }

    #[test]
    fn a_line_past_the_limit_is_refused_instead_of_buffered_forever() {
        let mut splitter = LineSplitter::new(8);
        splitter.push(b"12345678\n1234").unwrap();
        assert_eq!(drain(&mut splitter), ["12345678"]);
        splitter.push(b"5678").unwrap();
        let err = splitter.push(b"9").unwrap_err();
        assert!(err.contains("longer than 8 bytes"), "{err}");
    }
}
