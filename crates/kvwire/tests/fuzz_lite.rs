//! Stable-toolchain "fuzz-lite": runs the cargo-fuzz entry points over
//! random bytes and mutations of valid seeds, so CI exercises them without
//! nightly or libFuzzer, and replays every file of the committed corpus
//! (`fuzz/seeds/<target>/`, `fuzz/corpus/<target>/`) so inputs found by
//! `scripts/fuzz.sh` stay regression tests. Any panic fails the test.

use kvwire::fuzzing;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

/// A fuzz entry point.
type Entry = fn(&[u8]);

/// Every cargo-fuzz target with its entry point.
const TARGETS: [(&str, Entry); 3] = [
    ("parse_request", fuzzing::parse_request),
    ("batch_reader", fuzzing::batch_reader),
    ("transport_frames", fuzzing::transport_frames),
];

/// Files of `fuzz/<kind>/<target>/` (none if the directory does not exist).
fn corpus_files(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable fuzz directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn mutate(rng: &mut SmallRng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        match rng.gen_range(0..6) {
            0 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d[i] = [0, 0xff, 0x7f, 0x80, 1][rng.gen_range(0..5)];
            }
            2 => {
                let n = rng.gen_range(0..=d.len());
                d.truncate(n);
            }
            3 => {
                let i = rng.gen_range(0..=d.len());
                d.insert(i, rng.gen());
            }
            4 if !d.is_empty() => {
                let i = rng.gen_range(0..d.len());
                d.remove(i);
            }
            _ => d.extend((0..rng.gen_range(0..8)).map(|_| rng.gen::<u8>())),
        }
    }
    d
}

#[test]
fn fuzz_lite_parse_request() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0001);
    let seeds = fuzzing::seed_frames();
    for s in &seeds {
        fuzzing::parse_request(s);
    }
    for i in 0..30_000 {
        let d: Vec<u8> = if i % 10 == 0 {
            (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
        } else {
            let k = rng.gen_range(0..seeds.len());
            mutate(&mut rng, &seeds[k])
        };
        // The entry point also re-finalizes its input itself.
        fuzzing::parse_request(&d);
    }
}

#[test]
fn fuzz_lite_batch_reader() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0002);
    let seeds = fuzzing::seed_batches();
    for s in &seeds {
        fuzzing::batch_reader(s);
    }
    for i in 0..50_000 {
        let d = if i % 10 == 0 {
            let mut d: Vec<u8> = (0..rng.gen_range(0..100)).map(|_| rng.gen()).collect();
            if d.len() >= 2 {
                d[0] = 0x4b;
                d[1] = 1;
            }
            d
        } else {
            let k = rng.gen_range(0..seeds.len());
            mutate(&mut rng, &seeds[k])
        };
        fuzzing::batch_reader(&d);
    }
}

#[test]
fn fuzz_lite_transport_frames() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    let seeds = fuzzing::seed_transport();
    for s in &seeds {
        fuzzing::transport_frames(s);
    }
    for i in 0..20_000 {
        let d = if i % 10 == 0 {
            (0..rng.gen_range(0..120)).map(|_| rng.gen()).collect()
        } else {
            let k = rng.gen_range(0..seeds.len());
            mutate(&mut rng, &seeds[k])
        };
        // The entry point also re-finalizes its input itself.
        fuzzing::transport_frames(&d);
    }
}

/// Replays the committed seeds and the minimized corpus of every target.
#[test]
fn replay_committed_corpus() {
    for (target, entry) in TARGETS {
        let seeds = corpus_files("seeds", target);
        assert!(!seeds.is_empty(), "fuzz/seeds/{target}/ is empty");
        for path in seeds.iter().chain(&corpus_files("corpus", target)) {
            let data = std::fs::read(path).expect("readable corpus file");
            if let Err(e) = std::panic::catch_unwind(|| entry(&data)) {
                panic!("{target}: {} panics: {e:?}", path.display());
            }
        }
    }
}

#[test]
fn seeds_are_valid() {
    let seeds = fuzzing::seed_frames();
    assert!(kvwire::parse_request(&seeds[0]).is_ok());
    assert!(kvwire::parse_response(&seeds[1]).is_ok());
    for s in &seeds[2..4] {
        let r = kvwire::parse_request(s).unwrap();
        assert_eq!(
            kvwire::BatchReader::new(r.payload)
                .unwrap()
                .filter(Result::is_ok)
                .count(),
            13
        );
    }
}

#[test]
fn transport_seeds_classify() {
    use kvwire::{parse_client_frame, parse_server_frame, ClientFrame, ServerFrame};
    let s = fuzzing::seed_transport();
    assert!(matches!(
        parse_client_frame(&s[0]),
        Ok(ClientFrame::Connect(_))
    ));
    assert!(matches!(
        parse_server_frame(&s[1]),
        Ok(ServerFrame::Accept(_))
    ));
    assert!(matches!(
        parse_client_frame(&s[2]),
        Ok(ClientFrame::Request(_))
    ));
    assert!(matches!(
        parse_server_frame(&s[3]),
        Ok(ServerFrame::Response(_))
    ));
    for f in &s[4..8] {
        assert!(matches!(parse_server_frame(f), Ok(ServerFrame::Ack(_))));
    }
    assert!(matches!(
        parse_server_frame(&s[8]),
        Ok(ServerFrame::Accept(_))
    ));
    assert_eq!(
        parse_client_frame(&s[9]).unwrap_err(),
        kvwire::DropReason::BadConnect
    );
    assert!(parse_server_frame(&s[10]).is_err());
}
