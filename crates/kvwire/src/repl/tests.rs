use super::*;
use crate::frame::{emit_request_headers, RESPONSE_HEADER_LEN};
use crate::transport::{emit_ack, NakCode};
use proptest::prelude::*;

fn params() -> FrameParams {
    FrameParams::new(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
    )
}

fn fields() -> WriteImmFields {
    WriteImmFields {
        dest_qp: 0xab_cdef,
        psn: 0xff_fffe,
        ack_req: true,
        va: 0x7f00_0000_1000,
        rkey: 0xdead_beef,
        imm: 0x0102_0304,
    }
}

fn build(payload: &[u8], f: &WriteImmFields) -> Vec<u8> {
    let mut buf = vec![0xa5u8; write_imm_frame_len(payload.len()) + 7];
    let h = emit_write_imm_headers(&mut buf, &params(), f, payload.len()).unwrap();
    buf[h..h + payload.len()].copy_from_slice(payload);
    let n = finalize(&mut buf).unwrap();
    assert_eq!(n, write_imm_frame_len(payload.len()));
    buf.truncate(n);
    buf
}

#[test]
fn write_imm_round_trips_every_pad() {
    for len in 0..=13usize {
        let payload: Vec<u8> = (0..len as u8).collect();
        let f = fields();
        let frame = build(&payload, &f);
        let ReplFrame::WriteImm(w) = parse_repl_frame(&frame).unwrap() else {
            panic!("not a WriteImm");
        };
        assert_eq!(w.payload, &payload[..]);
        assert_eq!((w.va, w.rkey, w.imm), (f.va, f.rkey, f.imm));
        assert_eq!(
            (w.link.dest_qp, w.link.psn, w.link.ack_req),
            (f.dest_qp, f.psn, true)
        );
        assert_eq!(w.link.src_ip, Ipv4Addr::new(10, 0, 0, 1));
        // Layout: opcode 0x0B, AckReq bit, ImmDt big-endian after the RETH.
        assert_eq!(frame[BTH_OFF], 0x0b);
        assert_eq!(frame[BTH_OFF + 8], 0x80);
        assert_eq!(&frame[EXT_OFF + 16..EXT_OFF + 20], &[1, 2, 3, 4]);
        assert_eq!(usize::from(frame[BTH_OFF + 1] >> 4 & 3), pad_len(len));
    }
    let mut f = fields();
    f.ack_req = false;
    let frame = build(b"x", &f);
    assert!(matches!(parse_repl_frame(&frame), Ok(ReplFrame::WriteImm(w)) if !w.link.ack_req));
}

#[test]
fn icrc_covers_immediate_and_payload() {
    let frame = build(b"hello, replica", &fields());
    let icrc_off = frame.len() - ICRC_LEN;
    // Every byte of the RETH, ImmDt, payload and pad is covered by the ICRC.
    for i in EXT_OFF..icrc_off {
        let mut bad = frame.clone();
        bad[i] ^= 0x40;
        assert_eq!(
            parse_repl_frame(&bad).unwrap_err(),
            DropReason::BadIcrc,
            "byte {i}"
        );
    }
    // The ICRC bytes themselves.
    let mut bad = frame.clone();
    bad[icrc_off] ^= 1;
    assert_eq!(parse_repl_frame(&bad).unwrap_err(), DropReason::BadIcrc);
    // FECN/BECN (BTH byte 4) is variant: not covered.
    let mut ecn = frame.clone();
    ecn[BTH_OFF + 4] = 0xc0;
    assert!(parse_repl_frame(&ecn).is_ok());
    // A changed immediate with a recomputed ICRC parses with the new value.
    let mut re = frame.clone();
    re[EXT_OFF + 19] = 0x99;
    finalize(&mut re).unwrap();
    assert!(matches!(parse_repl_frame(&re), Ok(ReplFrame::WriteImm(w)) if w.imm == 0x0102_0399));
}

#[test]
fn bad_lengths_are_dropped() {
    let frame = build(b"abcdefgh", &fields());
    // RETH DMA length ≠ payload length.
    let mut bad = frame.clone();
    bad[EXT_OFF + 15] = 9;
    finalize(&mut bad).unwrap();
    assert_eq!(
        parse_repl_frame(&bad).unwrap_err(),
        DropReason::LengthMismatch
    );
    // A 0x0B frame too short for RETH + ImmDt: a SEND frame relabelled.
    let mut short = vec![0u8; 128];
    let n = emit_send(&mut short, &params(), 1, 2, &[0u8; 16]).unwrap();
    short[BTH_OFF] = opcode::RC_RDMA_WRITE_ONLY_IMM;
    finalize(&mut short[..n]).unwrap();
    assert_eq!(
        parse_repl_frame(&short[..n]).unwrap_err(),
        DropReason::TruncatedReth
    );
    // Other opcodes are not the replication link's.
    let mut req = vec![0u8; 128];
    emit_request_headers(&mut req, &params(), 1, 2, 3, 4, 8).unwrap();
    let n = finalize(&mut req).unwrap();
    assert_eq!(
        parse_repl_frame(&req[..n]).unwrap_err(),
        DropReason::BadBthOpcode
    );
    // Emitters refuse short buffers and oversized payloads.
    let mut tiny = [0u8; RESPONSE_HEADER_LEN];
    assert_eq!(
        emit_write_imm_headers(&mut tiny, &params(), &fields(), 8),
        Err(EmitError::BufferTooSmall)
    );
    assert_eq!(
        emit_write_imm_headers(&mut tiny, &params(), &fields(), 70_000),
        Err(EmitError::PayloadTooLarge)
    );
    assert_eq!(
        emit_send(&mut tiny, &params(), 1, 2, &[0; 64]),
        Err(EmitError::BufferTooSmall)
    );
}

#[test]
fn send_and_ack_parse() {
    let mut buf = [0u8; 256];
    for len in [0usize, 1, 5, 40] {
        let payload: Vec<u8> = (0..len as u8).map(|b| b ^ 0x5a).collect();
        let n = emit_send(&mut buf, &params(), 0x33, 0, &payload).unwrap();
        assert_eq!(n, send_frame_len(len));
        let ReplFrame::Send(s) = parse_repl_frame(&buf[..n]).unwrap() else {
            panic!("not a Send");
        };
        assert_eq!((s.link.dest_qp, s.payload), (0x33, &payload[..]));
        let back = s.link.reply_params([9; 6], Ipv4Addr::new(10, 0, 0, 9), 7);
        assert_eq!((back.dst_mac, back.dst_ip), (s.link.src_mac, s.link.src_ip));
    }
    let s = Syndrome::Nak(NakCode::PsnSequenceError);
    let n = emit_ack(&mut buf, &params(), 0x33, 0x42, s, 0).unwrap();
    let ReplFrame::Ack(a) = parse_repl_frame(&buf[..n]).unwrap() else {
        panic!("not an Ack");
    };
    assert_eq!((a.dest_qp, a.psn, a.syndrome), (0x33, 0x42, s));
}

#[test]
fn capacity_matches_frame_len() {
    for mtu in [1500usize, 4200, 9000] {
        let cap = write_imm_payload_capacity(mtu);
        assert_eq!(cap % 4, 0);
        assert!(write_imm_frame_len(cap) - ethernet::HEADER_LEN <= mtu);
        assert!(write_imm_frame_len(cap + 4) - ethernet::HEADER_LEN > mtu);
    }
    assert_eq!(write_imm_payload_capacity(1500), 1436);
}

proptest! {
    /// Random corruptions of valid frames, and random bytes, never panic.
    #[test]
    fn mutations_never_panic(payload in prop::collection::vec(any::<u8>(), 0..200),
                             flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
                             cut in any::<usize>(), noise in prop::collection::vec(any::<u8>(), 0..300)) {
        let mut frame = build(&payload, &fields());
        for (i, x) in flips {
            let i = i % frame.len();
            frame[i] ^= x;
        }
        let _ = parse_repl_frame(&frame);
        let _ = finalize(&mut frame);
        let _ = parse_repl_frame(&frame);
        let _ = parse_repl_frame(&frame[..cut % (frame.len() + 1)]);
        let _ = parse_repl_frame(&noise);
    }
}

/// tshark decodes the frames as RoCEv2 RDMA WRITE Only with Immediate and
/// SEND Only, the segment without malformed/expert warnings.
#[test]
fn tshark_decodes_write_imm() {
    if !crate::test_util::tshark_available() {
        return;
    }
    let seg = build(b"segment payload!", &fields());
    let mut send = [0u8; 128];
    let n = emit_send(&mut send, &params(), 5, 0, b"ctrl").unwrap();
    let path = crate::test_util::write_pcap("repl", &[&seg[..], &send[..n]]);
    let run = |filter: &str| crate::test_util::tshark_count(&path, filter);
    assert_eq!(
        run("infiniband.bth.opcode == 0x0b && infiniband.reth && infiniband.immdt"),
        1
    );
    assert_eq!(run("infiniband.bth.opcode == 0x04"), 1);
    assert_eq!(run("infiniband.immdt == 01:02:03:04"), 1);
    assert_eq!(run("ip.checksum.status == 1"), 2);
    // (tshark's RPC-over-RDMA heuristic claims SEND payloads and calls them
    // malformed: only the segment is checked for warnings.)
    assert_eq!(
        run("infiniband.bth.opcode == 0x0b && (_ws.malformed || _ws.expert.severity >= warning)"),
        0
    );
    let _ = std::fs::remove_file(&path);
}
