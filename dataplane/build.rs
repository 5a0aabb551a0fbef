//! Build script: exports the `dpdk` crate's `sendmsg` and `munmap` from the dataplane
//! binary, so the memif PMD that EAL loads calls them (the workarounds of
//! `dpdk::memif_fix`, issue 29, and `dpdk::memif_unmap`).

fn main() {
    // Keep each definition (an archive member nothing else might pull in) and put it
    // in the dynamic symbol table, ahead of libc's for every shared library.
    for sym in ["sendmsg", "munmap"] {
        println!("cargo:rustc-link-arg-bins=-Wl,--undefined={sym}");
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={sym}");
    }
}
