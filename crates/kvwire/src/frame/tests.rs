//! Unit tests of `frame.rs`.

use super::*;

/// Built by `tools/scapy_vectors.py` with scapy's RoCE contrib module
/// (independent ICRC and IPv4 checksum, payload bytes written by hand).
static SCAPY_REQUEST: [u8; 106] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x5c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0x8f, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
    0x00, 0x02, 0xc0, 0x00, 0x12, 0xb7, 0x00, 0x48, 0x00, 0x00, 0x0a, 0x30, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x11, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x12, 0x34,
    0xab, 0xcd, 0x00, 0x00, 0x00, 0x1d, 0x4b, 0x01, 0x00, 0x02, 0x01, 0x02, 0x03, 0x04, 0x02, 0x05,
    0x00, 0x06, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x77, 0x6f, 0x72, 0x6c, 0x64, 0x21, 0x81, 0x68, 0x65,
    0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00, 0xe1, 0xeb, 0x53, 0x6b,
];

/// Built by `tools/scapy_vectors.py` (UD SEND ONLY + DETH).
static SCAPY_RESPONSE: [u8; 90] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x4c, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0x9f, 0x0a, 0x00, 0x00, 0x02, 0x0a, 0x00,
    0x00, 0x01, 0xc0, 0x00, 0x12, 0xb7, 0x00, 0x38, 0x00, 0x00, 0x64, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x11, 0x00, 0x00, 0x01, 0x00, 0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x01, 0x52, 0x01,
    0x00, 0x02, 0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06,
    0x77, 0x6f, 0x72, 0x6c, 0x64, 0x21, 0x28, 0x3a, 0xda, 0x84,
];

#[test]
fn constants() {
    assert_eq!(REQUEST_HEADER_LEN, 70);
    assert_eq!(RESPONSE_HEADER_LEN, 62);
    assert_eq!(request_payload_capacity(DEFAULT_MTU), 1440);
    assert_eq!(response_payload_capacity(DEFAULT_MTU), 1448);
    assert_eq!(request_payload_capacity(MAX_MTU), 8940);
    assert_eq!(
        request_frame_len(request_payload_capacity(DEFAULT_MTU)),
        1514
    );
    assert_eq!(
        response_frame_len(response_payload_capacity(DEFAULT_MTU)),
        1514
    );
    assert_eq!(DropReason::ALL.len(), DropReason::COUNT);
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
        assert!(!r.name().is_empty());
    }
}

#[test]
fn emit_matches_scapy() {
    let mut buf = [0xa5u8; 106];
    assert_eq!(sample_request(&mut buf), 106);
    assert_eq!(buf, SCAPY_REQUEST);
    let mut buf = [0xa5u8; 90];
    assert_eq!(sample_response(&mut buf), 90);
    assert_eq!(buf, SCAPY_RESPONSE);
}

#[test]
fn parse_scapy_request() {
    let r = parse_request(&SCAPY_REQUEST).unwrap();
    assert_eq!(r.src_mac, [2, 0, 0, 0, 0, 1]);
    assert_eq!(r.dst_mac, [2, 0, 0, 0, 0, 2]);
    assert_eq!(r.src_ip, Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(r.dst_ip, Ipv4Addr::new(10, 0, 0, 2));
    assert_eq!(r.udp_src_port, 0xc000);
    assert_eq!(r.pkey, 0xffff);
    assert_eq!(
        (r.dest_qp, r.psn, r.va, r.rkey),
        (0x11, 0x100, 0x1_0000, 0x1234_abcd)
    );
    assert_eq!(r.payload.len(), 29);
    assert_eq!(&r.payload[..2], &[0x4b, 0x01]);
    assert_eq!(parse_request_unverified(&SCAPY_REQUEST), Ok(r));
    assert_eq!(
        parse_response(&SCAPY_REQUEST).unwrap_err(),
        DropReason::BadBthOpcode
    );
    let own_mac = [2, 0, 0, 0, 0, 2];
    let own_ip = Ipv4Addr::new(10, 0, 0, 2);
    let mut want = FrameParams::new(own_mac, r.src_mac, own_ip, r.src_ip, 7);
    want.pkey = r.pkey;
    assert_eq!(r.reply_params(own_mac, own_ip, 7), want);
}

/// A reply comes from the server's own MAC and IP whatever the request was sent
/// to: a request to the broadcast MAC is not answered from ff:ff:ff:ff:ff:ff.
#[test]
fn reply_comes_from_own_addresses() {
    let own_mac: MacAddr = [2, 0, 0, 0, 0, 2];
    let own_ip = Ipv4Addr::new(10, 0, 0, 2);
    let client_mac: MacAddr = [2, 0, 0, 0, 0, 1];
    let client_ip = Ipv4Addr::new(10, 0, 0, 1);
    let request_to = |dst_mac: MacAddr, dst_ip: Ipv4Addr| {
        let mut p = FrameParams::new(client_mac, dst_mac, client_ip, dst_ip, 0xc000);
        p.pkey = 0x8001;
        let mut f = vec![0u8; request_frame_len(8)];
        emit_request_headers(&mut f, &p, 0x11, 5, 0x1000, 42, 8).unwrap();
        finalize(&mut f).unwrap();
        f
    };
    // To the broadcast MAC (accepted by PROTOCOL.md §5), to our own MAC, and to
    // another host (the server drops that one as `WrongDestination` before it
    // replies; the reply's source would still be ours).
    for (dst_mac, dst_ip) in [
        ([0xff; 6], own_ip),
        (own_mac, own_ip),
        ([2, 0, 0, 0, 0, 9], Ipv4Addr::new(10, 0, 0, 9)),
    ] {
        let f = request_to(dst_mac, dst_ip);
        let req = parse_request(&f).unwrap();
        assert_eq!((req.dst_mac, req.dst_ip), (dst_mac, dst_ip));
        let p = req.reply_params(own_mac, own_ip, 0xc001);
        assert_eq!(
            (p.src_mac, p.dst_mac, p.src_ip, p.dst_ip),
            (own_mac, client_mac, own_ip, client_ip),
            "request to {dst_mac:02x?} {dst_ip}"
        );
        assert_eq!((p.udp_src_port, p.pkey), (0xc001, 0x8001));
        let mut b = vec![0u8; response_frame_len(0)];
        emit_response_headers(&mut b, &p, 0x11, 0, 0x1111_1111, 1, 0).unwrap();
        finalize(&mut b).unwrap();
        let resp = parse_response(&b).unwrap();
        assert_eq!(
            (resp.src_mac, resp.dst_mac, resp.src_ip, resp.dst_ip),
            (own_mac, client_mac, own_ip, client_ip)
        );
    }
}

#[test]
fn parse_scapy_response() {
    let r = parse_response(&SCAPY_RESPONSE).unwrap();
    assert_eq!(
        (r.dest_qp, r.psn, r.qkey, r.src_qp),
        (0x11, 0x100, 0x1111_1111, 0x01)
    );
    assert_eq!(r.payload.len(), 24);
    assert_eq!(
        parse_request(&SCAPY_RESPONSE).unwrap_err(),
        DropReason::BadBthOpcode
    );
}

#[test]
fn every_covered_byte_is_checked() {
    for i in 0..SCAPY_REQUEST.len() {
        let mut f = SCAPY_REQUEST;
        f[i] ^= 0x01;
        let r = parse_request(&f);
        // MACs are outside IP; UDP checksum and BTH byte 4 are variant.
        let exempt = i < 12 || i == 40 || i == 41 || i == 46;
        assert_eq!(r.is_ok(), exempt, "byte {i}: {r:?}");
    }
}

#[test]
fn icrc_detected() {
    let mut f = SCAPY_REQUEST;
    f[100] ^= 0xff;
    assert_eq!(parse_request(&f).unwrap_err(), DropReason::BadIcrc);
    assert!(parse_request_unverified(&f).is_ok());
}

#[test]
fn truncation_at_every_offset() {
    for n in 0..SCAPY_REQUEST.len() {
        assert!(parse_request(&SCAPY_REQUEST[..n]).is_err(), "len {n}");
        assert!(parse_response(&SCAPY_RESPONSE[..n.min(90)]).is_err() || n >= 90);
    }
    // Trailing Ethernet padding beyond IP total length is fine.
    let mut long = [0u8; 120];
    long[..106].copy_from_slice(&SCAPY_REQUEST);
    assert!(parse_request(&long).is_ok());
}

/// Rewrites a field and re-finalizes so that only the intended check fails.
fn mutate(f: impl FnOnce(&mut [u8])) -> Result<(), DropReason> {
    let mut b = SCAPY_REQUEST;
    f(&mut b);
    let _ = finalize(&mut b);
    parse_request(&b).map(|_| ())
}

#[test]
fn drop_reasons() {
    assert_eq!(mutate(|b| b[12] = 0x86), Err(DropReason::NotIpv4));
    assert_eq!(mutate(|b| b[14] = 0x46), Err(DropReason::BadIpHeader));
    assert_eq!(mutate(|b| b[14] = 0x65), Err(DropReason::BadIpHeader));
    assert_eq!(mutate(|b| b[20] = 0x20), Err(DropReason::BadIpHeader));
    assert_eq!(mutate(|b| b[23] = 6), Err(DropReason::NotUdp));
    assert_eq!(mutate(|b| b[37] = 0xb8), Err(DropReason::NotRoce));
    assert_eq!(mutate(|b| b[39] = 0x44), Err(DropReason::BadUdpLength));
    assert_eq!(mutate(|b| b[42] = 0x0b), Err(DropReason::BadBthOpcode));
    assert_eq!(mutate(|b| b[43] = 0x31), Err(DropReason::BadBthVersion));
    assert_eq!(mutate(|b| b[69] = 0x1c), Err(DropReason::LengthMismatch));
    assert_eq!(mutate(|b| b[43] = 0x00), Err(DropReason::LengthMismatch));
    let mut b = SCAPY_REQUEST;
    b[25] ^= 1;
    assert_eq!(parse_request(&b), Err(DropReason::BadIpChecksum));
    assert_eq!(parse_request(&[]), Err(DropReason::TooShort));
}

#[test]
fn lying_lengths() {
    // IP total length shorter than the transport headers.
    for tl in [20u16, 28, 40, 44, 60, 70] {
        let r = mutate(|b| {
            b[16..18].copy_from_slice(&tl.to_be_bytes());
            b[38..40].copy_from_slice(&(tl - 20).to_be_bytes());
        });
        assert!(r.is_err(), "{tl}");
    }
    // Larger than the frame.
    assert_eq!(mutate(|b| b[17] = 0xff), Err(DropReason::BadIpHeader));
}

#[test]
fn emit_errors() {
    let p = FrameParams::new([0; 6], [0; 6], Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1);
    let mut small = [0u8; 80];
    assert_eq!(
        emit_request_headers(&mut small, &p, 1, 1, 0, 0, 10),
        Err(EmitError::BufferTooSmall)
    );
    let mut big = vec![0u8; 70_000];
    assert_eq!(
        emit_request_headers(&mut big, &p, 1, 1, 0, 0, 65_500),
        Err(EmitError::PayloadTooLarge)
    );
    assert_eq!(finalize(&mut small[..20]), Err(EmitError::NotAFrame));
}

#[test]
fn template_reuse() {
    let mut f = SCAPY_REQUEST;
    Bth::new_unchecked(&mut f[BTH_OFF..EXT_OFF]).set_psn(0x101);
    assert_eq!(parse_request(&f).unwrap_err(), DropReason::BadIcrc);
    assert_eq!(finalize(&mut f), Ok(106));
    assert_eq!(parse_request(&f).unwrap().psn, 0x101);
}

#[test]
fn emit_errors_never_overflow() {
    let p = FrameParams::new([0; 6], [0; 6], Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1);
    let mut b = [0u8; 128];
    for n in [usize::MAX, usize::MAX - 70, 1 << 40] {
        assert_eq!(
            emit_request_headers(&mut b, &p, 1, 1, 0, 0, n),
            Err(EmitError::PayloadTooLarge)
        );
        assert_eq!(
            emit_response_headers(&mut b, &p, 1, 1, 0, 0, n),
            Err(EmitError::PayloadTooLarge)
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn roundtrip_any_fields(
        len in 0usize..9000,
        qp in 0u32..(1 << 24),
        psn in 0u32..(1 << 24),
        va: u64,
        key: u32,
        sport: u16,
        tos: u8,
        ttl: u8,
        fill: u8,
    ) {
        let mut p = FrameParams::new([1; 6], [2; 6], Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), sport);
        p.tos = tos;
        p.ttl = ttl;
        let mut b = vec![0xa5u8; request_frame_len(len)];
        let h = emit_request_headers(&mut b, &p, qp, psn, va, key, len).unwrap();
        b[h..h + len].fill(fill);
        proptest::prop_assert_eq!(finalize(&mut b), Ok(b.len()));
        let r = parse_request(&b).unwrap();
        proptest::prop_assert_eq!((r.dest_qp, r.psn, r.va, r.rkey, r.udp_src_port), (qp, psn, va, key, sport));
        proptest::prop_assert_eq!(r.payload.len(), len);
        proptest::prop_assert!(r.payload.iter().all(|&x| x == fill));

        let mut b = vec![0xa5u8; response_frame_len(len)];
        let h = emit_response_headers(&mut b, &p, qp, psn, key, qp ^ 1, len).unwrap();
        b[h..h + len].fill(fill);
        proptest::prop_assert_eq!(finalize(&mut b), Ok(b.len()));
        let r = parse_response(&b).unwrap();
        proptest::prop_assert_eq!((r.dest_qp, r.psn, r.qkey, r.src_qp), (qp, psn, key, qp ^ 1));
        proptest::prop_assert_eq!(r.payload.len(), len);
    }
}

/// Writes the frames to a pcap and checks tshark decodes them as
/// InfiniBand without malformed/expert warnings. Without a working tshark it
/// is skipped with a note, or fails if `KVD_REQUIRE_TOOLS=1`.
#[test]
fn tshark_decodes_as_infiniband() {
    if !crate::test_util::tshark_available() {
        return;
    }
    let mut jumbo = vec![0u8; request_frame_len(8000)];
    let p = FrameParams::new(
        [2; 6],
        [4; 6],
        Ipv4Addr::new(1, 2, 3, 4),
        Ipv4Addr::new(5, 6, 7, 8),
        0xd00d,
    );
    emit_request_headers(&mut jumbo, &p, 3, 0xff_ffff, 0x1000, 5, 8000).unwrap();
    finalize(&mut jumbo).unwrap();
    let path = crate::test_util::write_pcap(
        "frame",
        &[&SCAPY_REQUEST[..], &SCAPY_RESPONSE[..], &jumbo[..]],
    );
    let run = |filter: &str| crate::test_util::tshark_count(&path, filter);
    assert_eq!(run("infiniband.bth.opcode == 0x0a && infiniband.reth"), 2);
    assert_eq!(run("infiniband.bth.opcode == 0x64 && infiniband.deth"), 1);
    assert_eq!(run("ip.checksum.status == 1"), 3);
    assert_eq!(
        run("_ws.malformed || _ws.expert.severity >= warning || ip.checksum.status == 0"),
        0
    );
    let _ = std::fs::remove_file(&path);
}
