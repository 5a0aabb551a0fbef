//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the stable
//! "fuzz-lite" test. Each must never panic on any input; a panic is either a
//! decoder bug or a broken round-trip property.
//!
//! | entry point | decoders |
//! |---|---|
//! | [`parse_request`] | `parse_request`, `parse_request_unverified`, `parse_response` |
//! | [`batch_reader`] | `BatchReader`, `ResponseReader` |
//! | [`transport_frames`] | `parse_client_frame`, `parse_server_frame`, `Connect`/`Accept`/`Syndrome` decoding |

use crate::ib::MASK_24;
use crate::transport::{
    self, Accept, AcceptFrame, AckFrame, ClientFrame, Connect, ConnectFrame, ServerFrame, Syndrome,
    CONNECT_LEN,
};
use crate::{frame, payload, DropReason, EmitError, FrameParams};

/// Parses `data` as a request frame, as received and again after recomputing
/// its IPv4 checksum and ICRC (so mutations reach past both checks); on
/// success also decodes its batch and re-emits an equivalent frame, which must
/// parse back to the same request.
pub fn parse_request(data: &[u8]) {
    parse_request_once(data);
    if data.len() >= frame::EXT_OFF {
        let mut fixed = data.to_vec();
        if frame::finalize(&mut fixed).is_ok() {
            parse_request_once(&fixed);
        }
    }
}

/// The checks of [`parse_request`] on one frame.
fn parse_request_once(data: &[u8]) {
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

/// The v2 classifiers on `data` as received, and again after recomputing its
/// IPv4 checksum and ICRC (so mutations reach past both checks); then frames
/// emitted from fields read out of `data` must classify back to those fields.
///
/// Checked on every classified frame:
/// * `parse_client_frame` agrees with `parse_request` and `parse_server_frame`
///   with `parse_response` (same request/response, or the same early error);
/// * a CONNECT, ACCEPT, ACK/NAK or response re-emitted with `emit_connect`,
///   `emit_accept`, `emit_ack` or `emit_response_headers` parses back equal;
/// * `Connect`, `Accept` and `Syndrome` decode → encode → decode is stable.
pub fn transport_frames(data: &[u8]) {
    classify(data);
    if data.len() >= frame::EXT_OFF {
        let mut fixed = data.to_vec();
        if frame::finalize(&mut fixed).is_ok() {
            classify(&fixed);
        }
    }
    payload_codecs(data);
    emit_from_fields(data);
}

/// Both classifiers on one frame, checked against the v1 parsers and re-emitted.
fn classify(data: &[u8]) {
    let client = transport::parse_client_frame(data);
    match frame::parse_request(data) {
        Ok(r) => assert_eq!(client, Ok(ClientFrame::Request(r))),
        // Only a non-request opcode can make the classifier see more than parse_request.
        Err(DropReason::BadBthOpcode) => assert!(!matches!(client, Ok(ClientFrame::Request(_)))),
        Err(e) => assert_eq!(client, Err(e)),
    }
    if let Ok(ClientFrame::Connect(c)) = client {
        reemit_connect(&c);
    }
    let server = transport::parse_server_frame(data);
    match frame::parse_response(data) {
        Ok(r) if r.payload.first() == Some(&transport::CONNECT_MAGIC) => {
            assert!(matches!(
                server,
                Ok(ServerFrame::Accept(_)) | Err(DropReason::BadPayload)
            ));
        }
        Ok(r) => assert_eq!(server, Ok(ServerFrame::Response(r))),
        Err(DropReason::BadBthOpcode) => {
            assert!(!matches!(server, Ok(ServerFrame::Response(_))));
        }
        Err(e) => assert_eq!(server, Err(e)),
    }
    match server {
        Ok(ServerFrame::Accept(a)) => reemit_accept(&a),
        Ok(ServerFrame::Ack(a)) => reemit_ack(&a),
        Ok(ServerFrame::Response(r)) => reemit_response(&r),
        Err(_) => {}
    }
}

/// Addresses for re-emitted frames whose parsed form does not carry them.
fn any_params() -> FrameParams {
    FrameParams::new(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        core::net::Ipv4Addr::new(10, 0, 0, 2),
        core::net::Ipv4Addr::new(10, 0, 0, 1),
        0xc000,
    )
}

fn reemit_connect(c: &ConnectFrame) {
    let mut params = FrameParams::new(c.src_mac, c.dst_mac, c.src_ip, c.dst_ip, 0xc000);
    params.pkey = c.pkey;
    let mut buf = [0u8; transport::CONNECT_FRAME_LEN];
    let n = transport::emit_connect(&mut buf, &params, c.dest_qp, c.psn, &c.connect)
        .expect("CONNECT fits");
    assert_eq!(
        transport::parse_client_frame(&buf[..n]),
        Ok(ClientFrame::Connect(*c))
    );
}

fn reemit_accept(a: &AcceptFrame) {
    let mut buf = [0u8; transport::ACCEPT_FRAME_LEN];
    let n = transport::emit_accept(
        &mut buf,
        &any_params(),
        a.dest_qp,
        a.qkey,
        a.src_qp,
        &a.accept,
    )
    .expect("ACCEPT fits");
    assert_eq!(
        transport::parse_server_frame(&buf[..n]),
        Ok(ServerFrame::Accept(*a))
    );
}

fn reemit_ack(a: &AckFrame) {
    let mut buf = [0u8; transport::ACK_FRAME_LEN];
    let n = transport::emit_ack(&mut buf, &any_params(), a.dest_qp, a.psn, a.syndrome, a.msn)
        .expect("ACK fits");
    assert_eq!(
        transport::parse_server_frame(&buf[..n]),
        Ok(ServerFrame::Ack(*a))
    );
}

fn reemit_response(r: &frame::Response<'_>) {
    let mut params = FrameParams::new(r.src_mac, r.dst_mac, r.src_ip, r.dst_ip, r.udp_src_port);
    params.pkey = r.pkey;
    let mut buf = vec![0u8; frame::response_frame_len(r.payload.len())];
    let h = match frame::emit_response_headers(
        &mut buf,
        &params,
        r.dest_qp,
        r.psn,
        r.qkey,
        r.src_qp,
        r.payload.len(),
    ) {
        Ok(h) => h,
        // The received frame's pad count may be smaller than the emitter's, so
        // a payload near 64 KiB may not fit an IPv4 packet once re-padded.
        Err(EmitError::PayloadTooLarge) => return,
        Err(e) => panic!("emit_response_headers: {e}"),
    };
    buf[h..h + r.payload.len()].copy_from_slice(r.payload);
    frame::finalize(&mut buf).expect("finalize");
    assert_eq!(
        transport::parse_server_frame(&buf),
        Ok(ServerFrame::Response(*r))
    );
    if let Ok(results) = payload::ResponseReader::new(r.payload) {
        results.for_each(drop);
    }
}

/// The fixed-size payload codecs on the first bytes of `data`.
fn payload_codecs(data: &[u8]) {
    if let Some(c) = data.get(..CONNECT_LEN).and_then(Connect::decode) {
        let mut out = [0u8; CONNECT_LEN];
        c.encode(&mut out);
        assert_eq!(
            &out[..],
            &data[..CONNECT_LEN],
            "CONNECT has no ignored bits"
        );
    }
    if let Some(a) = Accept::decode(data) {
        let mut out = [0u8; transport::OPENED_ACCEPT_LEN];
        let n = a.encode_into(&mut out);
        assert_eq!(Accept::decode(&out[..n]), Some(a));
    }
    if let Some((c, join)) = Connect::decode_any(data.get(..data.len().min(64)).unwrap_or(data)) {
        let mut out = [0u8; transport::MAX_JOIN_LEN];
        let n = c.encode_join(&join, &mut out);
        assert_eq!(&out[..n], data, "a connection payload has no ignored bits");
    }
    if let Some(&b) = data.first() {
        if let Some(s) = Syndrome::from_byte(b) {
            assert_eq!(s.to_byte(), b);
        }
    }
}

/// Reads fixed-size fields from fuzz input, zero-filled past its end.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

/// CONNECT, ACCEPT and ACK frames emitted from arbitrary field values (read
/// from `data`) parse back to those values (24-bit fields truncated).
fn emit_from_fields(data: &[u8]) {
    let mut f = Fields(data);
    let mut params = FrameParams::new(f.take(), f.take(), f.u32().into(), f.u32().into(), f.u16());
    params.pkey = f.u16();
    params.tos = f.u8();
    params.ttl = f.u8();
    params.ip_id = f.u16();
    let (dest_qp, psn) = (f.u32(), f.u32());

    let connect = Connect {
        rkey: f.u32(),
        nonce: f.u64(),
    };
    let mut buf = [0u8; transport::OPENED_ACCEPT_FRAME_LEN];
    let n =
        transport::emit_connect(&mut buf, &params, dest_qp, psn, &connect).expect("CONNECT fits");
    let want = ConnectFrame {
        src_mac: params.src_mac,
        dst_mac: params.dst_mac,
        src_ip: params.src_ip,
        dst_ip: params.dst_ip,
        pkey: params.pkey,
        dest_qp: dest_qp & MASK_24,
        psn: psn & MASK_24,
        connect,
        join: transport::Join::Connect,
    };
    assert_eq!(
        transport::parse_client_frame(&buf[..n]),
        Ok(ClientFrame::Connect(want))
    );
    let next = f.u32() & MASK_24;
    let n = transport::emit_resume(&mut buf, &params, dest_qp, psn, &connect, next)
        .expect("RESUME fits");
    let want = ConnectFrame {
        join: transport::Join::Resume {
            next_psn: next,
            proof: None,
        },
        ..want
    };
    assert_eq!(
        transport::parse_client_frame(&buf[..n]),
        Ok(ClientFrame::Connect(want))
    );

    let accept = Accept {
        nonce: f.u64(),
        credits: f.u16(),
        request_psn: f.u32() & MASK_24,
        response_psn: f.u32() & MASK_24,
        slot_size: f.u32(),
        region_va: f.u64(),
        resumed: f.u8() & 1 == 1,
        opened: (f.u8() & 1 == 1).then(|| transport::Opened {
            qpn: f.u32() & MASK_24,
            rkey: f.u32(),
            secret: f.u64(),
            sealed: f.u8() & 1 == 1,
        }),
    };
    let (qkey, src_qp) = (f.u32(), f.u32());
    let n = transport::emit_accept(&mut buf, &params, dest_qp, qkey, src_qp, &accept)
        .expect("ACCEPT fits");
    let want = AcceptFrame {
        dest_qp: dest_qp & MASK_24,
        qkey,
        src_qp: src_qp & MASK_24,
        accept,
    };
    assert_eq!(
        transport::parse_server_frame(&buf[..n]),
        Ok(ServerFrame::Accept(want))
    );

    let (syndrome_byte, msn) = (f.u8(), f.u32());
    if let Some(syndrome) = Syndrome::from_byte(syndrome_byte) {
        let n =
            transport::emit_ack(&mut buf, &params, dest_qp, psn, syndrome, msn).expect("ACK fits");
        let want = AckFrame {
            dest_qp: dest_qp & MASK_24,
            psn: psn & MASK_24,
            syndrome,
            msn: msn & MASK_24,
        };
        assert_eq!(
            transport::parse_server_frame(&buf[..n]),
            Ok(ServerFrame::Ack(want))
        );
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
    let ops: [KvOp<'_>; 13] = [
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
        KvOp::CompareDelete {
            key: b"user:1",
            expected: &v64,
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

/// Seed inputs for the `transport_frames` target: the worked-example CONNECT,
/// ACCEPT and NAK, an ACK and an RNR NAK, a request and a response (which the
/// classifiers must pass through), a padded ACCEPT, and broken variants.
pub fn seed_transport() -> Vec<Vec<u8>> {
    use transport::{NakCode, ACK_FRAME_LEN};
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    for (_, build) in transport::samples() {
        let n = build(&mut buf);
        out.push(buf[..n].to_vec());
    }
    let p = any_params();
    for s in [
        Syndrome::Ack { credits: 31 },
        Syndrome::RnrNak { timer: 14 },
        Syndrome::Nak(NakCode::InvalidRequest),
    ] {
        let n = transport::emit_ack(&mut buf, &p, 0x11, 0x100, s, 0x42).expect("fits");
        out.push(buf[..n].to_vec());
    }
    // An ACCEPT with 3 trailing payload bytes (decoded and ignored) and a pad.
    let a = Accept {
        nonce: 1,
        credits: 1024,
        request_psn: MASK_24,
        response_psn: 0,
        slot_size: 64,
        region_va: u64::MAX,
        resumed: false,
        opened: None,
    };
    let mut acc = [0u8; transport::ACCEPT_LEN + 3];
    a.encode((&mut acc[..transport::ACCEPT_LEN]).try_into().expect("len"));
    let len = frame::response_frame_len(acc.len());
    let h = frame::emit_response_headers(&mut buf, &p, 0x11, 0, 1, 1, acc.len()).expect("fits");
    buf[h..h + acc.len()].copy_from_slice(&acc);
    frame::finalize(&mut buf[..len]).expect("frame");
    out.push(buf[..len].to_vec());
    // A CONNECT whose kind byte says ACCEPT (valid ICRC: BadConnect), and the
    // NAK cut short.
    let mut bad = out[0].clone();
    bad[frame::EXT_OFF + 2] = transport::KIND_ACCEPT;
    frame::finalize(&mut bad).expect("frame");
    out.push(bad);
    out.push(out[4][..ACK_FRAME_LEN - 2].to_vec());
    out
}
