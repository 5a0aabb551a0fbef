//! Keeps the worked examples of `docs/PROTOCOL.md` true: the hex dumps in
//! the document must be exactly what this crate emits. Without the document
//! (e.g. the crate built outside the repository) the test is skipped with a
//! note, or fails if `KVD_REQUIRE_TOOLS=1`.

use kvwire::frame::hexdump;
use kvwire::transport::samples;

#[test]
fn protocol_doc_examples_match_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
    let doc = match std::fs::read_to_string(path) {
        Ok(doc) => doc,
        Err(e) => {
            assert!(
                std::env::var("KVD_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "{path} not readable ({e}), and KVD_REQUIRE_TOOLS=1 requires it"
            );
            eprintln!(
                "{path} not readable ({e}); skipped (set KVD_REQUIRE_TOOLS=1 to fail instead)"
            );
            return;
        }
    };
    let mut buf = [0u8; 256];
    for (name, build) in samples() {
        let n = build(&mut buf);
        assert!(
            doc.contains(&hexdump(&buf[..n])),
            "{name} dump in PROTOCOL.md is stale:\n{}",
            hexdump(&buf[..n])
        );
    }
}
