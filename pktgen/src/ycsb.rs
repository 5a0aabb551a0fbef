//! YCSB core workloads A–F as presets of pktgen's op mix and key popularity
//! (`--ycsb a|b|c|d|e|f`; docs/BENCHMARKS.md).
//!
//! | preset | YCSB | here |
//! |---|---|---|
//! | A | 50 % read, 50 % update, Zipfian | 50 % GET, 50 % PUT, Zipf θ |
//! | B | 95 % read, 5 % update, Zipfian | 95 % GET, 5 % PUT, Zipf θ |
//! | C | 100 % read, Zipfian | 100 % GET, Zipf θ |
//! | D | 95 % read, 5 % insert, latest | 95 % GET, 5 % PUT, latest θ (PUTs replace keys: the key set is fixed) |
//! | E | 95 % short scans, 5 % insert | refused: the protocol has no scan |
//! | F | 50 % read, 50 % read-modify-write, Zipfian | 50 % GET, 50 % fetch-add on the value (server-side read-modify-write), Zipf θ |
//!
//! θ is `--theta` (0.99 by default, YCSB's constant). `--dist` given with a preset
//! replaces the preset's popularity (e.g. `--ycsb b --dist uniform`); the op shares
//! of a preset cannot be combined with `--get/--put/--atomic/--vector/--reduce`.

use crate::cli::Dist;
use clap::ValueEnum;
use kvload::SizeDist;
use std::fmt;

/// A YCSB core workload (`--ycsb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ycsb {
    /// Update heavy: 50 % GET, 50 % PUT, Zipfian.
    A,
    /// Read mostly: 95 % GET, 5 % PUT, Zipfian.
    B,
    /// Read only: 100 % GET, Zipfian.
    C,
    /// Read latest: 95 % GET, 5 % PUT, the most recently loaded keys hottest.
    D,
    /// Short ranges: not supported (the protocol has no scan operation).
    E,
    /// Read-modify-write: 50 % GET, 50 % fetch-add on the value, Zipfian.
    F,
}

/// The op shares and key popularity a preset stands for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    /// Share of GETs.
    pub get: f64,
    /// Share of PUTs.
    pub put: f64,
    /// Share of UPDATE_S2S fetch-adds (8-byte values).
    pub atomic: f64,
    /// Share of UPDATE_S2V element-wise fetch-adds (values a multiple of 8 bytes).
    pub vector: f64,
    /// Key popularity.
    pub dist: Dist,
}

/// Why a preset cannot run with the given flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum YcsbError {
    /// Workload E: range scans, which the protocol does not have.
    NoScan,
    /// Workload F with a value size that is not a fixed multiple of 8 bytes.
    RmwValueSize(String),
}

impl fmt::Display for YcsbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            YcsbError::NoScan => f.write_str(
                "--ycsb e: YCSB workload E is 95% short range scans, and the KV-Direct \
                 protocol has no scan operation (docs/PROTOCOL.md: GET, PUT, DELETE, atomics, \
                 vector ops on single keys); workload E cannot run here",
            ),
            YcsbError::RmwValueSize(v) => write!(
                f,
                "--ycsb f: the read-modify-write runs as the server's fetch-add on the whole \
                 value (UPDATE_S2S for 8-byte values, UPDATE_S2V on every 8-byte element \
                 otherwise), so --value-size must be one fixed multiple of 8 bytes, not {v:?}"
            ),
        }
    }
}

impl std::error::Error for YcsbError {}

/// The preset of workload `w` for values of `sizes` (only F depends on them).
pub fn preset(w: Ycsb, sizes: &SizeDist) -> Result<Preset, YcsbError> {
    let mix = |get: f64, put: f64, atomic: f64, vector: f64, dist: Dist| Preset {
        get,
        put,
        atomic,
        vector,
        dist,
    };
    Ok(match w {
        Ycsb::A => mix(0.5, 0.5, 0.0, 0.0, Dist::Zipf),
        Ycsb::B => mix(0.95, 0.05, 0.0, 0.0, Dist::Zipf),
        Ycsb::C => mix(1.0, 0.0, 0.0, 0.0, Dist::Zipf),
        Ycsb::D => mix(0.95, 0.05, 0.0, 0.0, Dist::Latest),
        Ycsb::E => return Err(YcsbError::NoScan),
        Ycsb::F => {
            let v = sizes.min;
            if sizes.min != sizes.max || v == 0 || !v.is_multiple_of(8) {
                let shown = if sizes.min == sizes.max {
                    v.to_string()
                } else {
                    format!("{}-{}", sizes.min, sizes.max)
                };
                return Err(YcsbError::RmwValueSize(shown));
            }
            if v == 8 {
                mix(0.5, 0.0, 0.5, 0.0, Dist::Zipf)
            } else {
                mix(0.5, 0.0, 0.0, 0.5, Dist::Zipf)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tests::spec;
    use crate::spec::SpecError;
    use kvload::Distribution;

    fn fixed(n: usize) -> SizeDist {
        SizeDist { min: n, max: n }
    }

    #[test]
    fn each_preset_is_its_mix() {
        let p = |w| preset(w, &fixed(2)).unwrap();
        assert_eq!(
            (p(Ycsb::A).get, p(Ycsb::A).put, p(Ycsb::A).dist),
            (0.5, 0.5, Dist::Zipf)
        );
        assert_eq!(
            (p(Ycsb::B).get, p(Ycsb::B).put, p(Ycsb::B).dist),
            (0.95, 0.05, Dist::Zipf)
        );
        assert_eq!(
            (p(Ycsb::C).get, p(Ycsb::C).put, p(Ycsb::C).dist),
            (1.0, 0.0, Dist::Zipf)
        );
        assert_eq!(
            (p(Ycsb::D).get, p(Ycsb::D).put, p(Ycsb::D).dist),
            (0.95, 0.05, Dist::Latest)
        );
        for w in [Ycsb::A, Ycsb::B, Ycsb::C, Ycsb::D] {
            assert_eq!((p(w).atomic, p(w).vector), (0.0, 0.0), "{w:?}");
            let sum = p(w).get + p(w).put;
            assert!((sum - 1.0).abs() < 1e-12, "{w:?}: no DELETEs");
        }
    }

    #[test]
    fn f_is_a_server_side_read_modify_write() {
        let f8 = preset(Ycsb::F, &fixed(8)).unwrap();
        assert_eq!((f8.get, f8.put, f8.atomic, f8.vector), (0.5, 0.0, 0.5, 0.0));
        let f64b = preset(Ycsb::F, &fixed(64)).unwrap();
        assert_eq!(
            (f64b.get, f64b.put, f64b.atomic, f64b.vector),
            (0.5, 0.0, 0.0, 0.5)
        );
        assert_eq!(f64b.dist, Dist::Zipf);
        for bad in [fixed(2), fixed(12), SizeDist { min: 8, max: 16 }] {
            assert!(matches!(
                preset(Ycsb::F, &bad),
                Err(YcsbError::RmwValueSize(_))
            ));
        }
        let e = preset(Ycsb::F, &SizeDist { min: 8, max: 16 }).unwrap_err();
        assert!(e.to_string().contains("not \"8-16\""), "{e}");
    }

    #[test]
    fn e_is_refused_with_the_reason() {
        let e = preset(Ycsb::E, &fixed(2)).unwrap_err();
        assert_eq!(e, YcsbError::NoScan);
        assert!(e.to_string().contains("no scan operation"), "{e}");
        match spec(&["--ycsb", "e"]) {
            Err(SpecError::Ycsb(m)) => assert!(m.contains("workload E"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_spec_takes_the_preset() {
        let s = spec(&["--ycsb", "a"]).unwrap();
        assert_eq!((s.workload.get, s.workload.put), (0.5, 0.5));
        assert_eq!(s.workload.distribution(), Distribution::Zipf(0.99));
        assert!(s.workload.mix.delete_share().abs() < 1e-9);
        assert_eq!(s.workload.ycsb, Some(Ycsb::A));
        let s = spec(&["--ycsb", "d", "--theta", "0.9"]).unwrap();
        assert_eq!(s.workload.distribution(), Distribution::Latest(0.9));
        let s = spec(&["--ycsb", "b", "--dist", "uniform"]).unwrap();
        assert_eq!(s.workload.distribution(), Distribution::Uniform);
        assert_eq!((s.workload.get, s.workload.put), (0.95, 0.05));
        let s = spec(&["--ycsb", "f", "--value-size", "8"]).unwrap();
        assert_eq!((s.workload.get, s.workload.atomic), (0.5, 0.5));
        let s = spec(&["--ycsb", "f", "--value-size", "32"]).unwrap();
        assert_eq!((s.workload.get, s.workload.vector), (0.5, 0.5));
        assert!(matches!(spec(&["--ycsb", "f"]), Err(SpecError::Ycsb(_))));
        // Without a preset nothing changes: uniform, the flags' mix.
        let s = spec(&[]).unwrap();
        assert_eq!(s.workload.ycsb, None);
        assert_eq!(s.workload.distribution(), Distribution::Uniform);
    }

    #[test]
    fn a_preset_and_an_explicit_mix_conflict() {
        use crate::cli::Args;
        use clap::Parser;
        for flag in ["--get", "--put", "--atomic", "--vector", "--reduce"] {
            let r = Args::try_parse_from(["pktgen", "--ycsb", "a", flag, "0.5"]);
            assert!(r.is_err(), "{flag}");
        }
        assert!(Args::try_parse_from(["pktgen", "--ycsb", "a", "--theta", "0.8"]).is_ok());
    }
}
