//! Build script: exports the `dpdk` crate's `sendmsg` from the dataplane binary, so the
//! memif PMD that EAL loads calls it (the workaround of `dpdk::memif_fix`, issue 29).

fn main() {
    // Keep the definition (an archive member nothing else might pull in) and put it
    // in the dynamic symbol table, ahead of libc's for every shared library.
    println!("cargo:rustc-link-arg-bins=-Wl,--undefined=sendmsg");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=sendmsg");
}
