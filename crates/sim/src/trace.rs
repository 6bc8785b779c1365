//! The trace: every decision and observation of a run, hashed as it happens (xxh3), and
//! printed with `--verbose`. Two runs of one seed are the same run exactly when their
//! hashes are equal.

use xxhash_rust::xxh3::Xxh3;

/// A run's trace.
pub struct Trace {
    hasher: Xxh3,
    verbose: bool,
    lines: u64,
    label: String,
}

impl Trace {
    /// An empty trace; `verbose` prints every line.
    pub fn new(verbose: bool) -> Trace {
        Trace::labelled(verbose, "")
    }

    /// An empty trace whose lines are printed after `label` (which region they are from).
    pub fn labelled(verbose: bool, label: &str) -> Trace {
        Trace {
            hasher: Xxh3::new(),
            verbose,
            lines: 0,
            label: label.to_owned(),
        }
    }

    /// Adds a line (printed when verbose).
    pub fn line(&mut self, at_ms: u64, line: &str) {
        self.hasher.update(&at_ms.to_le_bytes());
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.lines += 1;
        if self.verbose {
            println!("{at_ms:>8} ms  {}{line}", self.label);
        }
    }

    /// Adds numbers that are too frequent to print (network deliveries).
    pub fn mix(&mut self, values: &[u64]) {
        for value in values {
            self.hasher.update(&value.to_le_bytes());
        }
    }

    /// The hash of everything added so far.
    pub fn digest(&self) -> u64 {
        self.hasher.digest()
    }

    /// How many lines were added.
    pub fn lines(&self) -> u64 {
        self.lines
    }
}
