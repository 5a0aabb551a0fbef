//! Stable-toolchain "fuzz-lite": runs the cargo-fuzz entry points over
//! random bytes and mutations of valid seeds, so CI exercises them without
//! nightly or libFuzzer. Any panic fails the test.

use kvwire::fuzzing;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

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
        let mut d = if i % 10 == 0 {
            (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
        } else {
            let k = rng.gen_range(0..seeds.len());
            mutate(&mut rng, &seeds[k])
        };
        fuzzing::parse_request(&d);
        // Re-finalize so mutations reach past the checksum/ICRC checks.
        if kvwire::finalize(&mut d).is_ok() {
            fuzzing::parse_request(&d);
        }
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
            12
        );
    }
}
