//! Prints the worked-example frames of `docs/PROTOCOL.md` as hex dumps
//! (`tests/protocol_doc.rs` checks that the document contains them).
//!
//! `cargo run -p kvwire --example dump_frames`

use kvwire::frame::hexdump;
use kvwire::transport::samples;

fn main() {
    let mut buf = [0u8; 256];
    for (name, build) in samples() {
        let n = build(&mut buf);
        println!("{name} ({n} bytes):\n{}", hexdump(&buf[..n]));
    }
}
