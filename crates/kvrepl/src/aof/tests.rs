use super::*;
use std::io::Cursor;
use std::path::PathBuf;

/// A fresh scratch directory under the system's temp dir.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvrepl-aof-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn header() -> SnapshotHeader {
    SnapshotHeader {
        repl_id: 42,
        epoch: 1,
        stream_offset: 1000,
        partitions: 1,
        created_unix_ms: 1,
    }
}

/// (key, value) of record `i`.
fn kv(i: u32) -> (Vec<u8>, Vec<u8>) {
    (
        format!("key{i}").into_bytes(),
        vec![i as u8; (i as usize * 7) % 90],
    )
}

/// Writes `blocks` blocks of 3 records each; block b ends at stream offset
/// 1000 + 100 (b + 1). Returns the path and the byte length after each block.
fn write_log(dir: &Path, blocks: u32) -> (PathBuf, Vec<u64>) {
    let path = dir.join("replica.aof");
    let mut w = AofWriter::create(&path, &header(), FsyncPolicy::No, 0).unwrap();
    let mut ends = vec![w.info().bytes];
    for b in 0..blocks {
        for i in 0..3 {
            let (k, v) = kv(b * 3 + i);
            w.append(&Record::Put { key: &k, value: &v }).unwrap();
        }
        w.commit(1000 + 100 * u64::from(b + 1), 0).unwrap();
        ends.push(w.info().bytes);
    }
    w.close(0, 0).unwrap();
    (path, ends)
}

/// A key and its value.
type Kv = (Vec<u8>, Vec<u8>);

fn records(bytes: &[u8]) -> Result<Vec<Kv>, SnapshotError> {
    let r = open_reader(Cursor::new(bytes))?;
    let mut out = Vec::new();
    r.for_each(|rec| {
        if let Record::Put { key, value } = rec {
            out.push((key.to_vec(), value.to_vec()));
        }
        Ok::<(), ()>(())
    })
    .map_err(|e| e.expect_err("no callback error"))?;
    Ok(out)
}

#[test]
fn policies_parse_and_print() {
    for p in ["always", "everysec", "no"] {
        assert_eq!(p.parse::<FsyncPolicy>().unwrap().to_string(), p);
    }
    assert!("sometimes".parse::<FsyncPolicy>().is_err());
}

#[test]
fn written_log_reads_back_and_reopens_for_append() {
    let dir = scratch("append");
    let (path, ends) = write_log(&dir, 4);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() as u64, *ends.last().unwrap());
    let want: Vec<_> = (0..12).map(kv).collect();
    assert_eq!(records(&bytes).unwrap(), want);
    // Reopen: nothing to recover; append more; the stream end carries on.
    let (mut w, rec) = AofWriter::open(&path, FsyncPolicy::Always, 0).unwrap();
    assert_eq!(rec.truncated_bytes, 0);
    assert_eq!(
        (rec.info.blocks, rec.info.records, rec.info.stream_end),
        (4, 12, 1400)
    );
    let (k, v) = kv(12);
    w.append(&Record::Put { key: &k, value: &v }).unwrap();
    assert!(matches!(
        w.commit(1300, 0),
        Err(SnapshotError::CorruptBlock {
            why: BlockFault::StreamEnd,
            ..
        })
    ));
    assert!(w.commit(1500, 0).unwrap(), "always: durable at commit");
    let info = w.close(1500, 0).unwrap();
    assert_eq!((info.blocks, info.records), (5, 13));
    let want: Vec<_> = (0..13).map(kv).collect();
    assert_eq!(records(&std::fs::read(&path).unwrap()).unwrap(), want);
    // A snapshot reader refuses a log file and the other way round.
    assert!(matches!(
        crate::snapshot::verify(&std::fs::read(&path).unwrap()[..]),
        Err(SnapshotError::WrongMagic { .. })
    ));
    assert!(AofWriter::create(&path, &header(), FsyncPolicy::No, 0).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn recovery_cuts_a_torn_last_block_at_every_length() {
    let dir = scratch("torn");
    let (path, ends) = write_log(&dir, 3);
    let whole = std::fs::read(&path).unwrap();
    // Every length from the end of the header to the whole file.
    for len in ends[0]..=*ends.last().unwrap() {
        std::fs::write(&path, &whole[..len as usize]).unwrap();
        let good = *ends.iter().filter(|&&e| e <= len).max().unwrap();
        let blocks = ends.iter().filter(|&&e| e <= len).count() as u64 - 1;
        let rec = recover(&path).unwrap();
        assert_eq!(rec.info.bytes, good, "length {len}");
        assert_eq!(rec.truncated_bytes, len - good);
        assert_eq!(rec.info.blocks, blocks);
        assert_eq!(
            rec.info.stream_end,
            if blocks == 0 { 0 } else { 1000 + 100 * blocks }
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        // The remaining file reads whole.
        let n = records(&std::fs::read(&path).unwrap()).unwrap().len() as u64;
        assert_eq!(n, blocks * 3);
        // Before recovery, the reader refuses a torn file.
        if len != good {
            assert!(records(&whole[..len as usize]).is_err());
        }
    }
    // Shorter than the header: refused, not truncated.
    std::fs::write(&path, &whole[..40]).unwrap();
    assert!(matches!(
        recover(&path),
        Err(SnapshotError::Truncated { .. })
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 40);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn recovery_cuts_a_zero_filled_or_garbled_tail_but_refuses_corruption_before_it() {
    let dir = scratch("garbled");
    let (path, ends) = write_log(&dir, 3);
    let whole = std::fs::read(&path).unwrap();
    // A tail of zeros after the last block (size extended, data never written).
    let mut zeros = whole.clone();
    zeros.extend_from_slice(&[0u8; 500]);
    std::fs::write(&path, &zeros).unwrap();
    let rec = recover(&path).unwrap();
    assert_eq!((rec.info.blocks, rec.truncated_bytes), (3, 500));
    // The last block complete in length but its payload zeroed (a partial write).
    let mut partial = whole.clone();
    let last = ends[2] as usize + crate::snapshot::BLOCK_HEADER_LEN + 2;
    partial[last..].fill(0);
    std::fs::write(&path, &partial).unwrap();
    let rec = recover(&path).unwrap();
    assert_eq!(rec.info.blocks, 2);
    assert_eq!(rec.info.bytes, ends[2]);
    // Every bit flip in a block before the last: refused, the file untouched; in the
    // last block: that block is cut (indistinguishable from a torn write).
    for i in ends[0] as usize..whole.len() {
        let mut bad = whole.clone();
        bad[i] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        match recover(&path) {
            Ok(rec) => {
                assert!(
                    i as u64 >= ends[2],
                    "byte {i}: a flip before the last block was truncated"
                );
                assert_eq!(rec.info.blocks, 2, "byte {i}");
                assert_eq!(std::fs::metadata(&path).unwrap().len(), ends[2]);
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        SnapshotError::CorruptBlock { .. } | SnapshotError::Truncated { .. }
                    ),
                    "byte {i}: {e}"
                );
                assert_eq!(std::fs::read(&path).unwrap(), bad, "byte {i}: file touched");
            }
        }
    }
    // Bit flips in the header: refused.
    for i in 0..HEADER_LEN {
        let mut bad = whole.clone();
        bad[i] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(recover(&path).is_err(), "header byte {i}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fsync_policies_sync_when_they_say() {
    let dir = scratch("fsync");
    let ms = 1_000_000u64;
    let run = |policy: FsyncPolicy, name: &str| {
        let path = dir.join(name);
        let mut w = AofWriter::create(&path, &header(), policy, 0).unwrap();
        let mut durable = Vec::new();
        for (n, t) in [100, 200, 1100, 1500, 2300].iter().enumerate() {
            w.append(&Record::Delete { key: b"k" }).unwrap();
            durable.push(w.commit(1000 + n as u64 + 1, t * ms).unwrap());
        }
        let quiet_tick = w.tick(2400 * ms).unwrap();
        let late_tick = w.tick(3400 * ms).unwrap();
        let syncs = w.syncs();
        w.close(1005, 4000 * ms).unwrap();
        (durable, quiet_tick, late_tick, syncs)
    };
    let (d, _, _, syncs) = run(FsyncPolicy::Always, "always");
    assert_eq!(d, vec![true; 5]);
    assert_eq!(syncs, 5);
    // everysec: synced at 1100 (1.1 s after creation) and 2300 (1.2 s later); the
    // tick at 2400 finds nothing new; nothing dirty at 3400 either.
    let (d, quiet, late, syncs) = run(FsyncPolicy::EverySec, "everysec");
    assert_eq!(d, vec![false, false, true, false, true]);
    assert_eq!((quiet, late, syncs), (false, false, 2));
    let (d, _, _, syncs) = run(FsyncPolicy::No, "no");
    assert_eq!(d, vec![false; 5]);
    assert_eq!(syncs, 0);
    // An everysec tick syncs a dirty file once the second has passed.
    let path = dir.join("tick");
    let mut w = AofWriter::create(&path, &header(), FsyncPolicy::EverySec, 0).unwrap();
    w.append(&Record::Delete { key: b"k" }).unwrap();
    assert!(!w.commit(1001, 10 * ms).unwrap());
    assert!(!w.tick(900 * ms).unwrap());
    assert!(w.tick(1000 * ms).unwrap());
    assert_eq!(w.syncs(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_mark_records_the_stream_end_and_a_new_stream_id_survives_reopening() {
    let dir = scratch("mark");
    let path = dir.join("replica.aof");
    let mut h = header();
    h.stream_offset = 0;
    let mut w = AofWriter::create(&path, &h, FsyncPolicy::No, 0).unwrap();
    let (k, v) = kv(1);
    w.append(&Record::Put { key: &k, value: &v }).unwrap();
    // A full sync's blocks carry no stream position (0); its end is marked.
    w.commit(0, 0).unwrap();
    w.mark(5000, 0).unwrap();
    // Nothing new: no second block.
    w.mark(5000, 0).unwrap();
    assert_eq!((w.info().blocks, w.info().stream_end), (2, 5000));
    w.set_stream(77, 3).unwrap();
    w.set_policy(FsyncPolicy::Always);
    assert!(w.commit(5000, 0).unwrap());
    drop(w);
    let (w, rec) = AofWriter::open(&path, FsyncPolicy::No, 0).unwrap();
    assert_eq!(rec.truncated_bytes, 0);
    let info = w.info();
    assert_eq!((info.header.repl_id, info.header.epoch), (77, 3));
    assert_eq!((info.stream_end, info.records), (5000, 1));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(records(&bytes).unwrap().len(), 1);
    // A flipped bit in the rewritten header is still caught.
    let mut bad = bytes.clone();
    bad[20] ^= 1;
    assert!(records(&bad).is_err());
}
