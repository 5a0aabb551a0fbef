//! Prints the worked-example frames of `docs/PROTOCOL.md` as hex dumps
//! (`tests/protocol_doc.rs` checks that the document contains them).
//!
//! `cargo run -p kvwire --example dump_frames`

use kvwire::frame::{hexdump, sample_request, sample_response};
use kvwire::transport::{sample_accept, sample_connect, sample_nak};

/// Builds one sample frame into a buffer; returns its length.
type Build = fn(&mut [u8]) -> usize;

fn main() {
    let samples: [(&str, Build); 5] = [
        ("connect", sample_connect),
        ("accept", sample_accept),
        ("request", sample_request),
        ("response", sample_response),
        ("nak", sample_nak),
    ];
    let mut buf = [0u8; 256];
    for (name, build) in samples {
        let n = build(&mut buf);
        println!("{name} ({n} bytes):\n{}", hexdump(&buf[..n]));
    }
}
