use super::*;
use crate::frame::{emit_request_headers, parse_request};
use crate::icrc::ICRC_LEN;

fn params() -> FrameParams {
    FrameParams::new(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
    )
}

#[test]
fn connect_round_trips_and_is_told_from_requests() {
    let mut buf = [0u8; 128];
    let c = Connect {
        rkey: 0x1234_abcd,
        nonce: 0x0102_0304_0506_0708,
    };
    let n = emit_connect(&mut buf, &params(), 17, 5, &c).unwrap();
    assert_eq!(n, CONNECT_FRAME_LEN);
    match parse_client_frame(&buf[..n]).unwrap() {
        ClientFrame::Connect(f) => {
            assert_eq!((f.dest_qp, f.psn, f.connect), (17, 5, c));
        }
        other => panic!("{other:?}"),
    }
    // Not a request, and not a response.
    assert_eq!(parse_request(&buf[..n]), Err(DropReason::BadBthOpcode));
    assert_eq!(
        parse_server_frame(&buf[..n]).unwrap_err(),
        DropReason::BadBthOpcode
    );
    // A corrupted payload byte fails the ICRC; a valid frame with a wrong kind is
    // BadConnect.
    let mut bad = buf;
    bad[EXT_OFF + 2] = 9;
    assert_eq!(
        parse_client_frame(&bad[..n]).unwrap_err(),
        DropReason::BadIcrc
    );
    finalize(&mut bad[..n]).unwrap();
    assert_eq!(
        parse_client_frame(&bad[..n]).unwrap_err(),
        DropReason::BadConnect
    );
}

#[test]
fn resume_round_trips_and_is_told_from_connect() {
    let mut buf = [0u8; 128];
    let c = Connect { rkey: 7, nonce: 99 };
    let n = emit_resume(&mut buf, &params(), 17, 0, &c, 0xab_cdef).unwrap();
    assert_eq!(n, RESUME_FRAME_LEN);
    assert_eq!(buf[EXT_OFF + 2], KIND_RESUME);
    match parse_client_frame(&buf[..n]).unwrap() {
        ClientFrame::Connect(f) => assert_eq!((f.connect, f.resume()), (c, Some(0xab_cdef))),
        other => panic!("{other:?}"),
    }
    // A CONNECT's 16 bytes with the RESUME kind, or a RESUME's 20 with the CONNECT
    // kind, or a next PSN beyond 24 bits: BadConnect.
    let mut p = [0u8; RESUME_LEN];
    c.encode_resume(5, &mut p);
    assert!(Connect::decode_any(&p[..CONNECT_LEN]).is_none());
    p[2] = KIND_CONNECT;
    assert!(Connect::decode_any(&p).is_none());
    p[2] = KIND_RESUME;
    p[16] = 1;
    assert!(Connect::decode_any(&p).is_none());
    let n = emit_connect(&mut buf, &params(), 17, 0, &c).unwrap();
    match parse_client_frame(&buf[..n]).unwrap() {
        ClientFrame::Connect(f) => assert_eq!((f.resume(), f.join), (None, Join::Connect)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn accept_carries_the_resumed_flag() {
    let mut a = Accept {
        nonce: 1,
        credits: 32,
        request_psn: 3,
        response_psn: 4,
        slot_size: 64,
        region_va: 0,
        resumed: true,
        opened: None,
    };
    let mut p = [0u8; ACCEPT_LEN];
    a.encode(&mut p);
    assert_eq!(p[3], ACCEPT_RESUMED);
    assert_eq!(Accept::decode(&p), Some(a));
    a.resumed = false;
    a.encode(&mut p);
    assert_eq!((p[3], Accept::decode(&p)), (0, Some(a)));
}

#[test]
fn response_parts_read_back_an_emitted_frame() {
    let mut buf = [0u8; 256];
    let payload = b"R\x02some payload!";
    let h = crate::frame::emit_response_headers(
        &mut buf,
        &params(),
        17,
        0x12_3456,
        1,
        2,
        payload.len(),
    )
    .unwrap();
    buf[h..h + payload.len()].copy_from_slice(payload);
    let n = finalize(&mut buf).unwrap();
    assert_eq!(
        crate::frame::response_parts_unchecked(&buf[..n]),
        Some((0x12_3456, &payload[..]))
    );
    assert_eq!(crate::frame::response_parts_unchecked(&buf[..20]), None);
}

#[test]
fn requests_still_parse_through_the_classifier() {
    let mut buf = [0u8; 128];
    let h = emit_request_headers(&mut buf, &params(), 17, 9, 4096, 7, 4).unwrap();
    buf[h..h + 4].copy_from_slice(b"abcd");
    let n = finalize(&mut buf).unwrap();
    match parse_client_frame(&buf[..n]).unwrap() {
        ClientFrame::Request(r) => assert_eq!((r.psn, r.payload), (9, &b"abcd"[..])),
        other => panic!("{other:?}"),
    }
}

#[test]
fn accept_round_trips() {
    let mut buf = [0u8; 128];
    let a = Accept {
        nonce: 42,
        credits: 32,
        request_psn: 0xff_fff0,
        response_psn: 7,
        slot_size: 32768,
        region_va: 1 << 32,
        resumed: false,
        opened: None,
    };
    let n = emit_accept(&mut buf, &params(), 17, 0x8001_0000, 1, &a).unwrap();
    assert_eq!(n, ACCEPT_FRAME_LEN);
    match parse_server_frame(&buf[..n]).unwrap() {
        ServerFrame::Accept(f) => {
            assert_eq!(
                (f.dest_qp, f.qkey, f.src_qp, f.accept),
                (17, 0x8001_0000, 1, a)
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn acks_round_trip_every_syndrome() {
    let mut buf = [0u8; 128];
    for s in [
        Syndrome::Ack { credits: 31 },
        Syndrome::RnrNak { timer: 14 },
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::Nak(NakCode::InvalidRequest),
    ] {
        let n = emit_ack(&mut buf, &params(), 17, 0xab_cdef, s, 0x12_3456).unwrap();
        assert_eq!(n, ACK_FRAME_LEN);
        match parse_server_frame(&buf[..n]).unwrap() {
            ServerFrame::Ack(f) => assert_eq!(
                f,
                AckFrame {
                    dest_qp: 17,
                    psn: 0xab_cdef,
                    syndrome: s,
                    msn: 0x12_3456
                }
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(Syndrome::from_byte(0x40), None, "reserved type 10");
    assert_eq!(Syndrome::from_byte(0x65), None, "reserved NAK code");
    assert_eq!(rnr_timer_micros(1), 10);
    assert_eq!(rnr_timer_micros(0), 655_360);
    assert_eq!(rnr_timer_micros(31), 491_520);
}

#[test]
fn slots_follow_the_psn_across_the_wrap() {
    let s = slot_size(1 << 20, 32);
    assert_eq!(s, 32768);
    assert_eq!(slot_va(1 << 32, s, 32, 0), 1 << 32);
    assert_eq!(slot_va(1 << 32, s, 32, 33), (1 << 32) + s);
    // 2^24 is a multiple of every power-of-two window: slot(2^24 - 1) + 1 == slot(0).
    assert_eq!(slot_va(0, s, 32, 0xff_ffff), 31 * s);
    assert_eq!(slot_size(100, 0), 0);
}

/// tshark decodes every v2 packet type as InfiniBand, with no malformed or expert
/// warnings (skipped without tshark unless `KVD_REQUIRE_TOOLS=1`).
#[test]
fn tshark_decodes_v2_packets() {
    if !crate::test_util::tshark_available() {
        return;
    }
    let p = params();
    let mut connect = [0u8; CONNECT_FRAME_LEN];
    emit_connect(&mut connect, &p, 17, 0, &Connect { rkey: 5, nonce: 9 }).unwrap();
    let mut accept = [0u8; ACCEPT_FRAME_LEN];
    let a = Accept {
        nonce: 9,
        credits: 32,
        request_psn: 100,
        response_psn: 200,
        slot_size: 32768,
        region_va: 1 << 32,
        resumed: false,
        opened: None,
    };
    emit_accept(&mut accept, &p, 17, 0x8001_0000, 1, &a).unwrap();
    let mut nak = [0u8; ACK_FRAME_LEN];
    emit_ack(
        &mut nak,
        &p,
        17,
        100,
        Syndrome::Nak(NakCode::PsnSequenceError),
        0,
    )
    .unwrap();
    let mut rnr = [0u8; ACK_FRAME_LEN];
    emit_ack(&mut rnr, &p, 17, 100, Syndrome::RnrNak { timer: 14 }, 0).unwrap();
    let mut inv = [0u8; ACK_FRAME_LEN];
    emit_ack(
        &mut inv,
        &p,
        17,
        100,
        Syndrome::Nak(NakCode::InvalidRequest),
        0,
    )
    .unwrap();
    let path = crate::test_util::write_pcap("transport", &[&connect, &accept, &nak, &rnr, &inv]);
    let run = |filter: &str| crate::test_util::tshark_count(&path, filter);
    assert_eq!(
        run("infiniband.bth.opcode == 0x04"),
        1,
        "CONNECT: RC SEND Only"
    );
    assert_eq!(run("infiniband.bth.opcode == 0x64 && infiniband.deth"), 1);
    assert_eq!(run("infiniband.bth.opcode == 0x11 && infiniband.aeth"), 3);
    assert_eq!(
        run("infiniband.aeth.syndrome == 0x60"),
        1,
        "NAK PSN seq error"
    );
    assert_eq!(
        run("infiniband.aeth.syndrome == 0x2e"),
        1,
        "RNR NAK timer 14"
    );
    assert_eq!(
        run("infiniband.aeth.syndrome == 0x61"),
        1,
        "NAK invalid request"
    );
    assert_eq!(run("ip.checksum.status == 1"), 5);
    assert_eq!(
        run("_ws.malformed || _ws.expert.severity >= warning || ip.checksum.status == 0"),
        0
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn open_close_and_secret_resume_round_trip() {
    let mut buf = [0u8; 128];
    let c = Connect {
        rkey: 0,
        nonce: 0xfeed,
    };
    let cases = [
        (
            CM_QPN,
            Join::Open {
                partition: 3,
                tenant: None,
            },
            CONNECT_LEN,
        ),
        (
            OPENED_QPN_BASE + 5,
            Join::Close {
                proof: 0x1122_3344_5566_7788,
            },
            CLOSE_LEN,
        ),
        (
            OPENED_QPN_BASE + 5,
            Join::Resume {
                next_psn: 0xab_cdef,
                proof: Some(u64::MAX),
            },
            SECRET_RESUME_LEN,
        ),
        (
            17,
            Join::Resume {
                next_psn: 9,
                proof: None,
            },
            RESUME_LEN,
        ),
        (17, Join::Connect, CONNECT_LEN),
    ];
    for (qp, join, len) in cases {
        let c = Connect {
            rkey: if matches!(join, Join::Open { .. }) {
                0
            } else {
                77
            },
            ..c
        };
        let n = emit_join(&mut buf, &params(), qp, &c, &join).unwrap();
        assert_eq!(n, EXT_OFF + len + ICRC_LEN, "{join:?}");
        match parse_client_frame(&buf[..n]).unwrap() {
            ClientFrame::Connect(f) => assert_eq!((f.dest_qp, f.connect, f.join), (qp, c, join)),
            other => panic!("{other:?}"),
        }
    }
    // An OPEN with its reserved bytes 6-7 set, a CLOSE without its secret, a
    // RESUME of 24 bytes: not connection payloads.
    let mut p = [0u8; MAX_JOIN_LEN];
    let n = c.encode_join(
        &Join::Open {
            partition: 1,
            tenant: None,
        },
        &mut p,
    );
    p[7] = 1;
    assert!(Connect::decode_any(&p[..n]).is_none());
    let n = c.encode_join(&Join::Close { proof: 1 }, &mut p);
    assert!(Connect::decode_any(&p[..n - 8]).is_none());
    let n = c.encode_join(
        &Join::Resume {
            next_psn: 1,
            proof: Some(2),
        },
        &mut p,
    );
    assert!(Connect::decode_any(&p[..n - 4]).is_none());
    assert!(is_opened_qpn(OPENED_QPN_BASE) && is_opened_qpn(0xff_ffff));
    assert!(!is_opened_qpn(OPENED_QPN_BASE - 1) && !is_opened_qpn(1 << 24));
}

#[test]
fn an_opened_accept_names_its_qp() {
    let mut buf = [0u8; 160];
    let a = Accept {
        nonce: 42,
        credits: 32,
        request_psn: 1,
        response_psn: 2,
        slot_size: 32768,
        region_va: 1 << 32,
        resumed: false,
        opened: Some(Opened {
            qpn: OPENED_QPN_BASE + 9,
            rkey: 0xdead_beef,
            secret: 0x0102_0304_0506_0708,
            sealed: true,
        }),
    };
    let n = emit_accept(&mut buf, &params(), OPENED_QPN_BASE + 9, 5, 1, &a).unwrap();
    assert_eq!(n, OPENED_ACCEPT_FRAME_LEN);
    match parse_server_frame(&buf[..n]).unwrap() {
        ServerFrame::Accept(f) => assert_eq!((f.dest_qp, f.accept), (OPENED_QPN_BASE + 9, a)),
        other => panic!("{other:?}"),
    }
    // The flag without the 16 bytes it announces: not an ACCEPT.
    let mut p = [0u8; OPENED_ACCEPT_LEN];
    a.encode_into(&mut p);
    assert!(Accept::decode(&p[..ACCEPT_LEN]).is_none());
    assert_eq!(Accept::decode(&p), Some(a));
    assert_eq!(p[3], ACCEPT_OPENED | ACCEPT_SEALED);
}

/// The secret never travels after the ACCEPT: a RESUME and a CLOSE carry proofs of
/// it, bound to their own fields, and a tenant's ACCEPT carries it sealed.
#[test]
fn proofs_of_the_connection_secret_and_the_seal() {
    let c = Connect {
        rkey: 0x1234,
        nonce: 99,
    };
    let secret = 0x5ec2_e7a1_b0b0_c0c0;
    let p = c.resume_proof(7, secret);
    assert_ne!(p, secret);
    assert_eq!(p, c.resume_proof(7, secret), "deterministic");
    assert_ne!(p, c.resume_proof(8, secret), "bound to the next PSN");
    assert_ne!(p, c.resume_proof(7, secret ^ 1), "bound to the secret");
    assert_ne!(
        c.close_proof(secret),
        c.resume_proof(7, secret),
        "a CLOSE is not a RESUME"
    );
    let other = Connect { nonce: 100, ..c };
    assert_ne!(
        other.close_proof(secret),
        c.close_proof(secret),
        "bound to the incarnation"
    );
    let o = Opened {
        qpn: OPENED_QPN_BASE + 1,
        rkey: 5,
        secret: secret ^ crate::tenant::seal_pad(b"tenant-secret-0123", 42, OPENED_QPN_BASE + 1),
        sealed: true,
    };
    assert_eq!(o.unsealed(42, b"tenant-secret-0123"), secret);
    assert_ne!(o.unsealed(42, b"another-secret-0123"), secret);
    assert_ne!(o.unsealed(43, b"tenant-secret-0123"), secret);
    let plain = Opened { sealed: false, ..o };
    assert_eq!(plain.unsealed(42, b"tenant-secret-0123"), o.secret);
}

#[test]
fn a_tenant_open_round_trips_and_its_proof_verifies() {
    let (mac, ip) = ([2, 0, 0, 0, 0, 1], Ipv4Addr::new(10, 0, 0, 1));
    let join = signed_open(2, 0xabc, 77, 1_700_000_000_000, b"secret", &mac, ip);
    let mut buf = [0u8; 160];
    let c = Connect {
        rkey: 0,
        nonce: 0xabc,
    };
    let n = emit_join(&mut buf, &params(), CM_QPN, &c, &join).unwrap();
    assert_eq!(n, EXT_OFF + TENANT_OPEN_LEN + ICRC_LEN);
    let ClientFrame::Connect(f) = parse_client_frame(&buf[..n]).unwrap() else {
        panic!("not a connection frame");
    };
    assert_eq!(f.join, join);
    let Join::Open {
        tenant: Some(t),
        partition,
    } = f.join
    else {
        panic!("no credential");
    };
    let fields = open_fields(partition, f.connect.nonce, t.id, t.time_ms);
    assert!(crate::tenant::verify_open(
        b"secret", &fields, &mac, ip, &t.proof
    ));
    // Tenant id 0 is no tenant: a 60-byte OPEN naming it is malformed.
    let mut p = [0u8; MAX_JOIN_LEN];
    let k = c.encode_join(&join, &mut p);
    p[16..20].fill(0);
    assert!(Connect::decode_any(&p[..k]).is_none());
}
