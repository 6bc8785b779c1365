//! `muster`: the server and the command-line client in one binary (DESIGN "Interfaces").

#![forbid(unsafe_code)]

fn main() {
    eprintln!("muster: the command line is being built (issue 3)");
    std::process::exit(2);
}
