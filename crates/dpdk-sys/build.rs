//! Build script: locate DPDK with `pkg-config`, generate bindings with bindgen,
//! compile the static-inline shim with DPDK's own cflags, and emit link flags.
//!
//! Environment knobs:
//! * `PKG_CONFIG` — the pkg-config binary (default `pkg-config`).
//! * `PKG_CONFIG_PATH` — where to look for `libdpdk.pc` (e.g. a DPDK built from source).
//! * `DPDK_SYS_STATIC=1` — link DPDK statically (`pkg-config --static`); the default is
//!   the shared libraries from the OS packages, whose PMDs EAL auto-loads from
//!   `RTE_EAL_PMD_PATH` (see the `dpdk` crate docs).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn pkg_config(args: &[&str]) -> String {
    let bin = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&bin)
        .args(args)
        .arg("libdpdk")
        .output()
        .unwrap_or_else(|e| panic!("dpdk-sys: cannot run `{bin}`: {e}; install pkg-config"));
    if !out.status.success() {
        panic!(
            "dpdk-sys: `{bin} {} libdpdk` failed: {}\n\
             install DPDK 22.11 development files (Debian: `apt install libdpdk-dev`) \
             or point PKG_CONFIG_PATH at a libdpdk.pc",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config output is not UTF-8")
}

/// Split pkg-config cflags into arguments, keeping `-include FILE` together.
fn split_cflags(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = s.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == "-include" {
            if let Some(file) = it.next() {
                out.push(tok.to_string());
                out.push(file.to_string());
            }
        } else {
            out.push(tok.to_string());
        }
    }
    out
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/wrapper.h");
    println!("cargo:rerun-if-changed=csrc/shim.h");
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=DPDK_SYS_STATIC");

    let is_static = env::var("DPDK_SYS_STATIC")
        .map(|v| v == "1")
        .unwrap_or(false);
    let version = pkg_config(&["--modversion"]).trim().to_string();
    let cflags = split_cflags(&pkg_config(&["--cflags"]));
    let libs = if is_static {
        pkg_config(&["--libs", "--static"])
    } else {
        pkg_config(&["--libs"])
    };

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let csrc = manifest.join("csrc");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());

    // Metadata for dependents (DEP_DPDK_VERSION / DEP_DPDK_CFLAGS).
    println!("cargo:version={version}");
    println!("cargo:cflags={}", cflags.join(" "));

    // ---- C shim -------------------------------------------------------------
    let mut build = cc::Build::new();
    build.file(csrc.join("shim.c")).include(&csrc).opt_level(3);
    for f in &cflags {
        build.flag(f);
    }
    // DPDK headers trip a few warnings we do not own.
    build.flag_if_supported("-Wno-unused-parameter");
    build.compile("dpdk_sys_shim");

    // ---- link flags -----------------------------------------------------------
    let mut it = libs.split_whitespace();
    while let Some(tok) = it.next() {
        if let Some(dir) = tok.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if let Some(lib) = tok.strip_prefix("-l:") {
            // `-l:librte_foo.a` (static builds): pass through verbatim.
            println!("cargo:rustc-link-arg=-l:{lib}");
        } else if let Some(lib) = tok.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        } else if tok.starts_with("-Wl,") {
            // --as-needed / --whole-archive / --no-whole-archive ...
            println!("cargo:rustc-link-arg={tok}");
        } else if tok == "-pthread" {
            println!("cargo:rustc-link-lib=pthread");
        } else {
            // Ignore anything else (e.g. stray -march in static Libs.private).
            let _ = it.clone();
        }
    }

    // ---- bindgen -------------------------------------------------------------
    let bindings = bindgen::Builder::default()
        .header(csrc.join("wrapper.h").to_string_lossy())
        .clang_args(cflags.iter())
        .clang_arg(format!("-I{}", csrc.display()))
        .allowlist_function("rte_.*")
        .allowlist_function("dpdk_shim_.*")
        .allowlist_type("rte_.*")
        .allowlist_var("rte_.*")
        .allowlist_var("RTE_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("LCORE_ID_ANY")
        .allowlist_var("RING_F_.*")
        // `rte_ether_addr` and friends are `packed, aligned(2)`: bindgen cannot
        // represent both in Rust, so treat those few as opaque byte blobs.
        .opaque_type("rte_arp_ipv4")
        .opaque_type("rte_arp_hdr")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .opaque_type("rte_gtp_psc_generic_hdr")
        .derive_default(true)
        .derive_debug(true)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("dpdk-sys: bindgen failed on DPDK headers");
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("dpdk-sys: cannot write bindings.rs");
}
