//! Writes the seed corpus of the cargo-fuzz targets into `fuzz/seeds/`.
//!
//! `cargo run -p kvwire --example write_fuzz_seeds [OUT_DIR]`

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds"));
    for (target, seeds) in [
        ("parse_request", kvwire::fuzzing::seed_frames()),
        ("batch_reader", kvwire::fuzzing::seed_batches()),
        ("transport_frames", kvwire::fuzzing::seed_transport()),
    ] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
