//! Prints the worked-example frames of `docs/PROTOCOL.md` as hex dumps
//! (`tests/protocol_doc.rs` checks that the document contains them).
//!
//! `cargo run -p kvwire --example dump_frames`

use kvwire::frame::{hexdump, sample_request, sample_response};

fn main() {
    let mut buf = [0u8; 256];
    let n = sample_request(&mut buf);
    println!("request ({n} bytes):\n{}", hexdump(&buf[..n]));
    let n = sample_response(&mut buf);
    println!("response ({n} bytes):\n{}", hexdump(&buf[..n]));
}
