//! Keeps the worked examples of `docs/PROTOCOL.md` true: the hex dumps in
//! the document must be exactly what this crate emits.

use kvwire::frame::{hexdump, sample_request, sample_response};

#[test]
fn protocol_doc_examples_match_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
    let Ok(doc) = std::fs::read_to_string(path) else {
        eprintln!("{path} not found; skipped");
        return;
    };
    let mut buf = [0u8; 256];
    let n = sample_request(&mut buf);
    assert!(
        doc.contains(&hexdump(&buf[..n])),
        "request dump in PROTOCOL.md is stale:\n{}",
        hexdump(&buf[..n])
    );
    let n = sample_response(&mut buf);
    assert!(
        doc.contains(&hexdump(&buf[..n])),
        "response dump in PROTOCOL.md is stale:\n{}",
        hexdump(&buf[..n])
    );
}
