use super::*;
use proptest::prelude::*;
use std::io::Cursor;

/// An owned record.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rec {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

impl Rec {
    fn as_record(&self) -> Record<'_> {
        match self {
            Rec::Put(k, v) => Record::Put { key: k, value: v },
            Rec::Delete(k) => Record::Delete { key: k },
        }
    }
    fn from_record(r: Record<'_>) -> Rec {
        match r {
            Record::Put { key, value } => Rec::Put(key.to_vec(), value.to_vec()),
            Record::Delete { key } => Rec::Delete(key.to_vec()),
            Record::QpState { .. } | Record::Group { .. } => {
                panic!("no QP state or groups in these tests")
            }
        }
    }
}

fn header() -> SnapshotHeader {
    SnapshotHeader {
        repl_id: 0x1122_3344_5566_7788,
        epoch: 3,
        stream_offset: 4096,
        partitions: 2,
        created_unix_ms: 1_700_000_000_000,
    }
}

fn write(recs: &[Rec]) -> Vec<u8> {
    let mut w = SnapshotWriter::new(Vec::new(), &header()).unwrap();
    for r in recs {
        w.push(&r.as_record()).unwrap();
    }
    let (buf, info) = w.finish().unwrap();
    assert_eq!(info.bytes, buf.len() as u64);
    assert_eq!(info.records, recs.len() as u64);
    buf
}

fn read(buf: &[u8]) -> Result<Vec<Rec>, SnapshotError> {
    let r = SnapshotReader::open(Cursor::new(buf))?;
    let mut out = Vec::new();
    r.for_each(|rec| {
        out.push(Rec::from_record(rec));
        Ok::<(), ()>(())
    })
    .map_err(|e| e.expect_err("the callback never fails"))?;
    Ok(out)
}

fn small() -> Vec<Rec> {
    vec![
        Rec::Put(b"alpha".to_vec(), b"1".to_vec()),
        Rec::Put(b"".to_vec(), b"".to_vec()),
        Rec::Delete(b"beta".to_vec()),
        Rec::Put(b"gamma".to_vec(), vec![7; 20]),
    ]
}

fn rec() -> impl Strategy<Value = Rec> {
    prop_oneof![
        4 => (prop::collection::vec(any::<u8>(), 0..40), prop::collection::vec(any::<u8>(), 0..600))
            .prop_map(|(k, v)| Rec::Put(k, v)),
        1 => prop::collection::vec(any::<u8>(), 0..40).prop_map(Rec::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn round_trip(recs in prop::collection::vec(rec(), 0..400)) {
        let buf = write(&recs);
        let info = verify(&buf[..]).unwrap();
        prop_assert_eq!(info.header, header());
        prop_assert_eq!(info.records, recs.len() as u64);
        prop_assert_eq!(info.bytes, buf.len() as u64);
        prop_assert_eq!(read(&buf).unwrap(), recs);
    }
}

#[test]
fn empty_and_multi_block_snapshots() {
    let buf = write(&[]);
    assert_eq!(buf.len(), HEADER_LEN + TRAILER_LEN);
    assert!(read(&buf).unwrap().is_empty());
    let big: Vec<Rec> = (0..200u32)
        .map(|i| Rec::Put(i.to_le_bytes().to_vec(), vec![i as u8; 2000]))
        .collect();
    let buf = write(&big);
    let info = verify(&buf[..]).unwrap();
    assert!(info.blocks >= 6, "{} blocks", info.blocks);
    assert_eq!(read(&buf).unwrap(), big);
    // A record as large as the format allows.
    let huge = vec![Rec::Put(vec![1; 255], vec![2; crate::MAX_RECORD_VALUE_LEN])];
    assert_eq!(read(&write(&huge)).unwrap(), huge);
}

#[test]
fn every_bit_flip_is_refused() {
    let good = write(&small());
    assert_eq!(read(&good).unwrap(), small());
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            let e = read(&bad).expect_err(&format!("flip of byte {i} bit {bit} accepted"));
            let expected_kind = match i {
                0..=7 => matches!(e, SnapshotError::WrongMagic { .. }),
                8..=11 => matches!(e, SnapshotError::UnsupportedVersion(_)),
                12..=63 => matches!(e, SnapshotError::CorruptHeader(_)),
                _ => matches!(
                    e,
                    SnapshotError::CorruptBlock { .. }
                        | SnapshotError::CorruptTrailer(_)
                        | SnapshotError::Truncated { .. }
                ),
            };
            assert!(expected_kind, "flip of byte {i} bit {bit}: {e}");
        }
    }
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    let good = write(&small());
    for len in 0..good.len() {
        match read(&good[..len]) {
            Err(SnapshotError::Truncated { at, .. }) => assert_eq!(at, len as u64),
            other => panic!("truncated to {len}: {other:?}"),
        }
        assert!(matches!(
            verify(&good[..len]),
            Err(SnapshotError::Truncated { .. })
        ));
    }
}

#[test]
fn wrong_magic_version_and_trailing_data_have_their_own_errors() {
    let good = write(&small());
    let mut aof = good.clone();
    aof[..8].copy_from_slice(b"KVDAOF\0\0");
    let e = read(&aof).unwrap_err();
    assert!(matches!(e, SnapshotError::WrongMagic { .. }), "{e}");
    assert!(e.to_string().contains("not a snapshot file"), "{e}");
    assert!(matches!(
        read(b"GIF89a.........."),
        Err(SnapshotError::WrongMagic { .. })
    ));
    // Version 2 with a valid header checksum.
    let mut v2 = good.clone();
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&v2[..60]);
    v2[60..64].copy_from_slice(&crc.to_le_bytes());
    let e = read(&v2).unwrap_err();
    assert!(matches!(e, SnapshotError::UnsupportedVersion(2)), "{e}");
    assert!(e.to_string().contains("version 2"));
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(
        read(&trailing),
        Err(SnapshotError::TrailingData { at }) if at == good.len() as u64
    ));
    // Two snapshots back to back are not one.
    let mut twice = good.clone();
    twice.extend_from_slice(&good);
    assert!(read(&twice).is_err());
    // A block dropped: the trailer's counts and checksum catch it.
    let big: Vec<Rec> = (0..100u32)
        .map(|i| Rec::Put(i.to_le_bytes().to_vec(), vec![1; 2000]))
        .collect();
    let buf = write(&big);
    let first_block_len = BLOCK_HEADER_LEN
        + u32::from_le_bytes(buf[HEADER_LEN + 8..HEADER_LEN + 12].try_into().unwrap()) as usize;
    let mut dropped = buf[..HEADER_LEN].to_vec();
    dropped.extend_from_slice(&buf[HEADER_LEN + first_block_len..]);
    assert!(matches!(
        read(&dropped),
        Err(SnapshotError::CorruptTrailer(_))
    ));
}

/// What happens to a file's bytes.
type Change = Box<dyn Fn(&mut Vec<u8>)>;

/// A file whose bytes change after the first full read (between `open` and
/// `for_each`).
struct Flaky {
    data: Vec<u8>,
    pos: usize,
    rewinds: u32,
    /// Applied at the second rewind.
    change: Change,
}

impl Read for Flaky {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Seek for Flaky {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let SeekFrom::Start(p) = to else {
            unreachable!()
        };
        if p == 0 {
            self.rewinds += 1;
            if self.rewinds == 2 {
                (self.change)(&mut self.data);
            }
        }
        self.pos = p as usize;
        Ok(p)
    }
}

#[test]
fn a_file_changed_after_verification_fails_the_read() {
    let good = write(&small());
    let len = good.len();
    // (change, records yielded before the failure)
    let cases: Vec<(Change, usize)> = vec![
        // A payload byte: its block is refused before any of its records is yielded.
        (
            Box::new(|d: &mut Vec<u8>| d[HEADER_LEN + BLOCK_HEADER_LEN + 2] ^= 1),
            0,
        ),
        // Cut short inside the trailer: the block was yielded, the end fails.
        (Box::new(move |d: &mut Vec<u8>| d.truncate(len - 3)), 4),
        // Replaced by another valid snapshot: its counts differ from the verified.
        (
            Box::new(|d: &mut Vec<u8>| *d = write(&[Rec::Delete(b"x".to_vec())])),
            1,
        ),
    ];
    for (change, want) in cases {
        let f = Flaky {
            data: good.clone(),
            pos: 0,
            rewinds: 0,
            change,
        };
        let r = SnapshotReader::open(f).expect("verified before the change");
        let mut yielded = 0;
        let res = r.for_each(|_| {
            yielded += 1;
            Ok::<(), ()>(())
        });
        assert!(matches!(res, Err(Err(_))), "{res:?}");
        assert_eq!(yielded, want);
    }
}

#[test]
fn a_callback_error_stops_the_read() {
    let good = write(&small());
    let r = SnapshotReader::open(Cursor::new(&good)).unwrap();
    let mut n = 0;
    let res = r.for_each(|_| {
        n += 1;
        if n == 2 {
            Err("full")
        } else {
            Ok(())
        }
    });
    assert!(matches!(res, Err(Ok("full"))));
    assert_eq!(n, 2);
}

#[test]
fn the_writer_refuses_unencodable_records() {
    let mut w = SnapshotWriter::new(Vec::new(), &header()).unwrap();
    let big = vec![0u8; crate::MAX_RECORD_VALUE_LEN + 1];
    assert!(matches!(
        w.push(&Record::Put {
            key: b"k",
            value: &big
        }),
        Err(SnapshotError::BadRecord(_))
    ));
    assert!(w.push_encoded(&[9, 0, 0, 0]).is_err());
    assert!(
        w.push_encoded(&[1, 1, 0, 0, b'k', 0]).is_err(),
        "trailing byte"
    );
    w.push_encoded(&[1, 1, 1, 0, b'k', b'v']).unwrap();
    let (buf, info) = w.finish().unwrap();
    assert_eq!(info.records, 1);
    assert_eq!(
        read(&buf).unwrap(),
        vec![Rec::Put(b"k".to_vec(), b"v".to_vec())]
    );
}
