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

/// Every drop reason is named in the document's drop table (§6.7), so a reason added
/// to `DropReason` cannot go undocumented.
#[test]
fn protocol_doc_names_every_drop_reason() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROTOCOL.md");
    let Ok(doc) = std::fs::read_to_string(path) else {
        // As above: skipped outside the repository unless KVD_REQUIRE_TOOLS=1.
        assert!(std::env::var("KVD_REQUIRE_TOOLS").as_deref() != Ok("1"));
        return;
    };
    let at = doc.find("### 6.7").expect("PROTOCOL.md has §6.7");
    let section = &doc[at..];
    for r in kvwire::DropReason::ALL {
        assert!(
            section.contains(&format!("`{}`", r.name())),
            "drop reason {} missing from PROTOCOL.md §6.7",
            r.name()
        );
    }
}
