//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the stable
//! "fuzz-lite" test. Each must never panic on any input.

use crate::{frame, payload};

/// Parses `data` as a request frame; on success also decodes its batch and
/// re-emits an equivalent frame, which must parse back to the same request.
pub fn parse_request(data: &[u8]) {
    let _ = frame::parse_response(data);
    let _ = crate::transport::parse_client_frame(data);
    let _ = crate::transport::parse_server_frame(data);
    let _ = frame::parse_request_unverified(data);
    if let Ok(req) = frame::parse_request(data) {
        for op in payload::BatchReader::new(req.payload).into_iter().flatten() {
            let _ = op;
        }
        let mut buf = [0u8; 9100];
        let n = frame::request_frame_len(req.payload.len());
        if n <= buf.len() {
            let params = frame::FrameParams::new(
                req.src_mac,
                req.dst_mac,
                req.src_ip,
                req.dst_ip,
                req.udp_src_port,
            );
            let h = frame::emit_request_headers(
                &mut buf,
                &params,
                req.dest_qp,
                req.psn,
                req.va,
                req.rkey,
                req.payload.len(),
            )
            .expect("emit fits");
            buf[h..h + req.payload.len()].copy_from_slice(req.payload);
            frame::finalize(&mut buf[..n]).expect("finalize");
            let again = frame::parse_request(&buf[..n]).expect("re-emitted frame parses");
            assert_eq!(again.payload, req.payload);
            assert_eq!(
                (again.dest_qp, again.psn, again.va, again.rkey),
                (req.dest_qp, req.psn, req.va, req.rkey)
            );
        }
    }
}

/// Decodes `data` as a request batch; every decoded op is re-encoded without
/// compression and with compression, and both must decode to the same ops.
pub fn batch_reader(data: &[u8]) {
    let _ = payload::ResponseReader::new(data).map(|r| r.result_count());
    if let Ok(r) = payload::ResponseReader::new(data) {
        for x in r {
            let _ = x;
        }
    }
    let Ok(reader) = payload::BatchReader::new(data) else {
        return;
    };
    // The server's decoding (plain runs, then the iterator for the op that ends each)
    // sees the same ops and error as plain iteration.
    let mut fast = reader.clone();
    let mut general = reader.clone();
    loop {
        fast.plain_ops(|op| assert_eq!(general.next(), Some(Ok(op))));
        let x = fast.next();
        assert_eq!(x, general.next());
        if x.is_none() {
            break;
        }
    }
    let id = reader.batch_id();
    let mut ops = [None; 64];
    let mut n = 0;
    for op in reader {
        match op {
            Ok(op) if n < ops.len() => {
                ops[n] = Some(op);
                n += 1;
            }
            _ => break,
        }
    }
    // Uncompressed re-encoding can be much longer than the input (copied
    // values are expanded), so size the buffer from the ops.
    let need = payload::BATCH_HEADER_LEN
        + ops
            .iter()
            .take(n)
            .flatten()
            .map(|o| 22 + o.key().len() + o.value().map_or(0, <[u8]>::len))
            .sum::<usize>();
    for compress in [false, true] {
        let mut buf = vec![0u8; need];
        let mut w = payload::BatchWriter::new(&mut buf, id)
            .expect("header fits")
            .with_compression(compress);
        for op in ops.iter().take(n).flatten() {
            w.push(op).expect("op fits");
        }
        let len = w.finish();
        let back = payload::BatchReader::new(&buf[..len]).expect("own header");
        assert_eq!(usize::from(back.op_count()), n);
        for (a, b) in back.zip(ops.iter().take(n).flatten()) {
            assert_eq!(a.as_ref(), Ok(b));
        }
    }
}

/// Seed inputs for the `parse_request` target: valid request and response
/// frames (with and without padding, a jumbo one) and a few broken ones.
pub fn seed_frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    let n = frame::sample_request(&mut buf);
    out.push(buf[..n].to_vec());
    let n = frame::sample_response(&mut buf);
    out.push(buf[..n].to_vec());
    let params = frame::FrameParams::new(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        core::net::Ipv4Addr::new(10, 0, 0, 1),
        core::net::Ipv4Addr::new(10, 0, 0, 2),
        0xc001,
    );
    for batch in seed_batches() {
        let mut f = vec![0u8; frame::request_frame_len(batch.len())];
        let h = frame::emit_request_headers(&mut f, &params, 0x12, 7, 0x2000, 42, batch.len())
            .expect("sized");
        f[h..h + batch.len()].copy_from_slice(&batch);
        frame::finalize(&mut f).expect("frame");
        out.push(f);
    }
    let mut bad = out[0].clone();
    bad.truncate(60);
    out.push(bad);
    out
}

/// Seed inputs for the `batch_reader` target: batches using every opcode
/// and both copy flags, plus a response payload.
pub fn seed_batches() -> Vec<Vec<u8>> {
    use payload::{func, pred, Atomic, BatchWriter, KvOp, ResponseWriter, Status, Width};
    let a = |f, w, s| Atomic {
        func: f,
        width: w,
        signed: s,
    };
    let v64 = [0x11u8; 64];
    let ops: [KvOp<'_>; 12] = [
        KvOp::Put {
            key: b"user:1",
            value: &v64,
        },
        KvOp::Put {
            key: b"user:2",
            value: &v64,
        },
        KvOp::Get { key: b"user:1" },
        KvOp::Get { key: b"user:2" },
        KvOp::Delete { key: b"user:3" },
        KvOp::UpdateS2S {
            key: b"ctr",
            atomic: a(func::FETCH_ADD, Width::W8, false),
            param: 1,
            param2: 0,
        },
        KvOp::UpdateS2S {
            key: b"ctr",
            atomic: a(func::CAS, Width::W4, true),
            param: 5,
            param2: 6,
        },
        KvOp::UpdateS2V {
            key: b"vec",
            atomic: a(func::MAX, Width::W2, true),
            param: 3,
            param2: 0,
        },
        KvOp::UpdateV2V {
            key: b"vec",
            atomic: a(func::XOR, Width::W1, false),
            delta: &[1, 2, 3, 4],
        },
        KvOp::Reduce {
            key: b"vec",
            atomic: a(func::FETCH_ADD, Width::W4, false),
            init: 0,
        },
        KvOp::Filter {
            key: b"vec",
            atomic: a(pred::GT, Width::W4, true),
            param: 10,
        },
        KvOp::UpdateS2S {
            key: b"u",
            atomic: a(200, Width::W8, false),
            param: 9,
            param2: 0,
        },
    ];
    let mut out = Vec::new();
    for compress in [true, false] {
        let mut buf = [0u8; 1440];
        let mut w = BatchWriter::new(&mut buf, 0xabcd)
            .expect("fits")
            .with_compression(compress);
        for o in &ops {
            w.push(o).expect("fits");
        }
        let n = w.finish();
        out.push(buf[..n].to_vec());
    }
    let mut buf = [0u8; 64];
    let mut w = ResponseWriter::new(&mut buf, 0xabcd, 0).expect("fits");
    w.push(Status::Ok, b"value").expect("fits");
    w.push(Status::NotFound, &[]).expect("fits");
    let n = w.finish();
    out.push(buf[..n].to_vec());
    out
}
