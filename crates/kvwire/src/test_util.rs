//! Test helpers: pcap files for tshark checks.

use std::path::{Path, PathBuf};

/// Whether tshark runs here. Without it the caller's test is skipped with a note, or
/// fails if `KVD_REQUIRE_TOOLS=1`.
pub(crate) fn tshark_available() -> bool {
    let why = match std::process::Command::new("tshark")
        .arg("--version")
        .output()
    {
        Ok(out) if out.status.success() => return true,
        Ok(out) => format!("`tshark --version` failed ({})", out.status),
        Err(e) => format!("tshark not runnable ({e})"),
    };
    assert!(
        std::env::var("KVD_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{why}, and KVD_REQUIRE_TOOLS=1 requires it"
    );
    eprintln!("{why}; skipped (set KVD_REQUIRE_TOOLS=1 to fail instead)");
    false
}

/// Writes `frames` as an Ethernet pcap in the temp dir; returns its path.
pub(crate) fn write_pcap(tag: &str, frames: &[&[u8]]) -> PathBuf {
    let mut pcap = Vec::new();
    pcap.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    pcap.extend_from_slice(&2u16.to_le_bytes());
    pcap.extend_from_slice(&4u16.to_le_bytes());
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&1u32.to_le_bytes());
    for f in frames {
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(f);
    }
    let path = std::env::temp_dir().join(format!("kvwire-{tag}-{}.pcap", std::process::id()));
    std::fs::write(&path, &pcap).unwrap();
    path
}

/// Number of packets of the pcap at `path` that match the display filter.
pub(crate) fn tshark_count(path: &Path, filter: &str) -> usize {
    let o = std::process::Command::new("tshark")
        .args(["-o", "ip.check_checksum:TRUE", "-n", "-r"])
        .arg(path)
        .args(["-Y", filter])
        .output()
        .unwrap();
    assert!(o.status.success(), "tshark failed on filter {filter:?}");
    String::from_utf8_lossy(&o.stdout).lines().count()
}
