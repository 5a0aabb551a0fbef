//! Prints the worked-example frames of `docs/PROTOCOL.md` as hex dumps
//! (`tests/protocol_doc.rs` checks that the document contains them).
//!
//! `cargo run -p kvwire --example dump_frames`

use kvwire::frame::{hexdump, sample_request, sample_response};
use kvwire::transport::{sample_accept, sample_connect, sample_nak};

fn main() {
    let samples: [(&str, fn(&mut [u8]) -> usize); 5] = [
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
