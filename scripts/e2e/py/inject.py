#!/usr/bin/env python3
"""Injects valid and malformed RoCEv2 request frames into the dataplane's TAP
interface from the kernel side (AF_PACKET raw socket) and checks the answers.

  inject.py run   --config configs/tap.json --iface kvtap0 --expect OUT.json
  inject.py check --expect OUT.json --stats DATAPLANE_STATS.json [--mbuf-baseline N]

`run` connects (protocol v2: a request before CONNECT, CONNECT/ACCEPT, a repeated and a
stale CONNECT), sends a valid PUT, one frame per malformed case, the transport cases
(duplicate → byte-identical replay, PSN ahead → one NAK, old duplicate, wrong slot,
reconnection moving the PSNs), then GETs; it checks every answer (or the absence of
one) and prints PASS/FAIL per case. It writes the
dataplane counters the run must have produced to OUT.json. `check` compares them
with the dataplane's --stats-json after it stopped: every drop reason exactly as
expected (all others zero), op_errors, requests, responses, rx_packets.

Frames are built by hand (rocev2.py, from docs/PROTOCOL.md), starting from a valid
request and patching one field, with the IPv4 checksum and ICRC recomputed so that
each case breaks exactly one thing (unless the case is about the checksum/ICRC).
"""
import argparse
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocev2 as r  # noqa: E402

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
QUIET_S = 0.25     # how long "no response" is waited for
REPLY_S = 2.0      # how long a response is waited for

CLIENT_MAC = "02:00:00:00:00:02"
CLIENT_IP = "127.0.0.3"


class Tap:
    def __init__(self, iface):
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.s.bind((iface, 0))
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    def drain(self):
        self.s.setblocking(False)
        try:
            while True:
                self.s.recv(65535)
        except BlockingIOError:
            pass
        self.s.setblocking(True)

    def send(self, frame):
        self.s.send(frame)

    def responses(self, wait):
        """Everything the server sent within `wait` seconds (responses, ACCEPTs,
        ACK/NAKs; stops waiting a short grace period after the first one)."""
        out = []
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            self.s.settimeout(left)
            try:
                data, addr = self.s.recvfrom(65535)
            except socket.timeout:
                return out
            if addr[2] == PACKET_OUTGOING:
                continue
            resp = r.parse_server_frame(data)
            if resp is not None:
                out.append(resp)
                # one response expected: wait only a little longer for stragglers
                deadline = min(deadline, time.monotonic() + 0.1)


def main_run(a):
    cfg = json.load(open(a.config))
    dp, srv, clients = cfg["dataplane"], cfg["server"], cfg["clients"]
    smac, sip = dp["mac"], dp["ip"]
    qpn, rkey = clients[0]["qpn"], clients[0]["rkey"]
    va0, vlen = srv["request_region_va"], srv["request_region_len"]
    tap = Tap(a.iface)

    expect = {"drops": {}, "op_errors": 0, "requests": 0, "responses": 0, "rx_packets": 0,
              "replays": 0, "naks_sent": 0, "accepts_sent": 0}
    credits = srv.get("credits", 32)
    state = {"psn": 0, "resp_psn": 0, "batch": 100, "fails": 0, "cases": 0,
             "slot": 0, "region": va0}
    sent = {}   # PSN -> (request frame, response frames) of served requests

    def req(payload, psn=None, **kw):
        psn = state["psn"] if psn is None else psn
        kw.setdefault("qpn", qpn)
        kw.setdefault("rkey", rkey)
        kw.setdefault("va", r.slot_va(state["region"], state["slot"], credits, psn))
        return r.request_frame(CLIENT_MAC, smac, CLIENT_IP, sip, kw["qpn"], psn,
                               kw["va"], kw["rkey"], payload, dma_len=kw.get("dma_len"))

    def next_batch():
        state["batch"] += 1
        return state["batch"]

    def result(name, ok, detail):
        state["cases"] += 1
        if not ok:
            state["fails"] += 1
        print(f"{'PASS' if ok else 'FAIL'}: malformed/{name}: {detail}")

    def exchange(frame, wait=REPLY_S):
        tap.drain()
        tap.send(frame)
        expect["rx_packets"] += 1
        return tap.responses(wait)

    def common_checks(g):
        return [("dest_qp", g["dqpn"], qpn), ("dst_mac", g["dst_mac"], r.mac(CLIENT_MAC)),
                ("src_mac", g["src_mac"], r.mac(smac)), ("ip_checksum_ok", g["ip_ok"], True),
                ("icrc_ok", g["icrc_ok"], True)]

    def report(name, checks, ok_detail):
        problems = [f"{k} {have!r} != {exp!r}" for k, have, exp in checks if have != exp]
        result(name, not problems, "; ".join(problems) if problems else ok_detail)

    def expect_reply(name, frame, batch_id, want):
        """Sends a frame that must be answered with exactly the results `want`."""
        got = exchange(frame)
        expect["requests"] += 1
        expect["responses"] += 1
        psn = state["psn"]
        state["psn"] = (state["psn"] + 1) & 0xFFFFFF
        if len(got) != 1 or got[0]["kind"] != "response":
            result(name, False, f"expected 1 response, got {[g['kind'] for g in got]}")
            return
        g = got[0]
        sent[psn] = (frame, g["raw"])
        checks = common_checks(g) + [
            ("magic", g["magic"], 0x52), ("version", g["version"], 1),
            ("batch_id", g["batch_id"], batch_id), ("first_index", g["first"], 0),
            ("flags", g["flags"], 0),
            ("deth_src_qp", g["src_qp"], srv["qpn"]), ("qkey", g["qkey"], srv["qkey"]),
            ("resp_psn", g["psn"], state["resp_psn"]),
            ("udp_len_ok", g["udp_len_ok"], True), ("results", g["results"], want),
        ]
        state["resp_psn"] = (state["resp_psn"] + 1) & 0xFFFFFF
        sts = ",".join(str(st) for st, _ in g["results"])
        report(name, checks, f"answered: {len(g['results'])} result(s), status {sts}, "
               "ICRC/IP checksum ok")

    def expect_drop(name, frame, reason, consumes_psn=False):
        """Sends a frame that must be dropped silently and counted under `reason`."""
        got = exchange(frame, QUIET_S)
        expect["drops"][reason] = expect["drops"].get(reason, 0) + 1
        if consumes_psn:
            state["psn"] = (state["psn"] + 1) & 0xFFFFFF
        result(name, not got, f"{len(frame)} B frame -> expect drop_{reason}" +
               (f", but got {[g['kind'] for g in got]}" if got else ", no response"))

    def expect_ack(name, frame, syndrome, psn, reason):
        """Sends a frame that must be answered by one RC Acknowledge and counted under
        `reason`."""
        got = exchange(frame)
        expect["drops"][reason] = expect["drops"].get(reason, 0) + 1
        expect["naks_sent"] += 1
        if len(got) != 1 or got[0]["kind"] != "ack":
            result(name, False, f"expected 1 ACK/NAK, got {[g['kind'] for g in got]}")
            return
        g = got[0]
        report(name, common_checks(g) + [("syndrome", g["syndrome"], syndrome),
                                         ("psn", g["psn"], psn), ("msn", g["msn"], 0)],
               f"answered RC Acknowledge, AETH 0x{syndrome:02x}, PSN {psn}")

    def connect(name, nonce, want_request_psn=None):
        """Sends a CONNECT that must be answered with an ACCEPT; adopts its values."""
        got = exchange(r.connect_frame(CLIENT_MAC, smac, CLIENT_IP, sip, qpn, rkey, nonce))
        expect["accepts_sent"] += 1
        if len(got) != 1 or got[0]["kind"] != "accept":
            result(name, False, f"expected 1 ACCEPT, got {[g['kind'] for g in got]}")
            return None
        g = got[0]
        checks = common_checks(g) + [
            ("version", g["version"], 2), ("kind", g["accept_kind"], 2),
            ("nonce", g["nonce"], nonce), ("credits", g["credits"], credits),
            ("region_va", g["region_va"], va0), ("qkey", g["qkey"], srv["qkey"]),
            ("slot_size >= 1440", g["slot_size"] >= 1440, True),
            ("slot_size * credits <= region", g["slot_size"] * credits <= vlen, True)]
        if want_request_psn is not None:
            checks.append(("request_psn", g["request_psn"], want_request_psn))
        report(name, checks, f"ACCEPT: W {g['credits']}, request PSN {g['request_psn']}, "
               f"response PSN {g['response_psn']}, slot {g['slot_size']} B")
        state.update(psn=g["request_psn"], resp_psn=g["response_psn"], slot=g["slot_size"])
        return g

    K, V = b"e2e-key", b"value-of-e2e-key"

    # -- 0. connection set-up (PROTOCOL.md 6.1) ----------------------------------------
    expect_ack("request-before-connect", req(r.batch(next_batch(), [r.op_get(K)]), psn=77),
               r.NAK_INVALID, 77, "not_connected")
    nonce = time.time_ns()
    acc = connect("connect", nonce)
    if acc is None:
        print("inject: no ACCEPT, cannot go on")
        return 1
    again = exchange(r.connect_frame(CLIENT_MAC, smac, CLIENT_IP, sip, qpn, rkey, nonce))
    expect["accepts_sent"] += 1
    result("connect-repeated-same-nonce",
           len(again) == 1 and again[0]["raw"] == acc["raw"],
           "the same ACCEPT, byte for byte" if len(again) == 1 and again[0]["raw"] == acc["raw"]
           else f"got {[g['kind'] for g in again]}")
    expect_drop("connect-stale-nonce",
                r.connect_frame(CLIENT_MAC, smac, CLIENT_IP, sip, qpn, rkey, nonce - 1),
                "stale_connect")
    expect_drop("connect-wrong-rkey",
                r.connect_frame(CLIENT_MAC, smac, CLIENT_IP, sip, qpn, rkey ^ 1, nonce + 1),
                "bad_rkey")

    # -- 1. a valid request first ------------------------------------------------------
    b = next_batch()
    expect_reply("valid-put", req(r.batch(b, [r.op_put(K, V)])), b, [(r.ST_OK, b"")])
    b = next_batch()
    expect_reply("valid-get", req(r.batch(b, [r.op_get(K)])), b, [(r.ST_OK, V)])

    def patched(frame, fn, ip_csum=True, icrc=True):
        f = bytearray(frame)
        fn(f)
        if ip_csum:
            r.fix_ip_checksum(f)
        if icrc:
            r.fix_icrc(f)
        return bytes(f)

    # Template for the drop cases: a valid GET at the current PSN.
    def tmpl():
        return req(r.batch(next_batch(), [r.op_get(K)]))
    good = tmpl()
    assert len(good) > r.REQ_PAYLOAD_OFF

    # -- 2. truncated at every header boundary (frame simply cut) -------------------
    expect_drop("truncated-eth-only", good[:r.ETH_LEN], "too_short")
    expect_drop("truncated-mid-ipv4", good[:r.IP_OFF + 10], "too_short")
    expect_drop("truncated-mid-udp", good[:r.UDP_OFF + 4], "too_short")
    expect_drop("truncated-mid-bth", good[:r.BTH_OFF + 6], "too_short")
    # cut in the RETH: the IPv4 total length now exceeds the frame
    expect_drop("truncated-mid-reth-cut", good[:r.EXT_OFF + 8], "bad_ip_header")

    # Consistently truncated: lengths/checksums/ICRC re-made for the shorter packet.
    def consistent(upto_udp_payload, pad_to=0):
        body = good[r.BTH_OFF:r.BTH_OFF + upto_udp_payload]
        f = bytearray(good[:r.BTH_OFF]) + body + b"\0\0\0\0"
        ip_total = r.IP_LEN + r.UDP_LEN + len(body) + 4
        struct.pack_into("!H", f, r.IP_OFF + 2, ip_total)
        struct.pack_into("!H", f, r.UDP_OFF + 4, ip_total - r.IP_LEN)
        r.fix_ip_checksum(f)
        if upto_udp_payload >= r.BTH_LEN:
            r.fix_icrc(f)
        if len(f) < pad_to:
            f += b"\0" * (pad_to - len(f))     # Ethernet padding (ignored by the receiver)
        return bytes(f)
    # a 6-byte BTH + 4 ICRC bytes inside a 60-byte (minimum size, padded) frame
    expect_drop("truncated-mid-bth-consistent", consistent(6, pad_to=60), "truncated_bth")
    # BTH + 8 of the 16 RETH bytes + ICRC, lengths and ICRC consistent
    expect_drop("truncated-mid-reth-consistent", consistent(r.BTH_LEN + 8), "truncated_reth")

    # -- 3. lengths that lie ------------------------------------------------------------
    def ip_len(delta):
        return lambda f: struct.pack_into("!H", f, r.IP_OFF + 2,
                                          struct.unpack_from("!H", f, r.IP_OFF + 2)[0] + delta)
    expect_drop("ipv4-total-length-too-long",
                patched(good, ip_len(+4), icrc=False), "bad_ip_header")
    expect_drop("ipv4-total-length-too-short",
                patched(good, ip_len(-4), icrc=False), "bad_udp_length")

    def udp_len(delta):
        return lambda f: struct.pack_into("!H", f, r.UDP_OFF + 4,
                                          struct.unpack_from("!H", f, r.UDP_OFF + 4)[0] + delta)
    expect_drop("udp-length-too-long", patched(good, udp_len(+4)), "bad_udp_length")
    expect_drop("udp-length-too-short", patched(good, udp_len(-4)), "bad_udp_length")

    # -- 4. checksums ---------------------------------------------------------------------
    def bad_ip_csum(f):
        f[r.IP_OFF + 11] ^= 0x01
    expect_drop("bad-ipv4-checksum", patched(good, bad_ip_csum, ip_csum=False, icrc=False),
                "bad_ip_checksum")

    def bad_icrc(f):
        f[-1] ^= 0x80
    expect_drop("bad-icrc", patched(good, bad_icrc, icrc=False), "bad_icrc")

    # -- 5. header fields ---------------------------------------------------------------
    expect_drop("wrong-udp-port",
                patched(good, lambda f: struct.pack_into("!H", f, r.UDP_OFF + 2, 4792)),
                "not_roce")
    expect_drop("not-ipv4-ethertype",
                patched(good, lambda f: f.__setitem__(slice(12, 14), b"\x86\xdd"),
                        ip_csum=False, icrc=False), "not_ipv4")
    expect_drop("not-udp-protocol",
                patched(good, lambda f: f.__setitem__(r.IP_OFF + 9, 6)), "not_udp")
    expect_drop("ipv4-fragment-mf",
                patched(good, lambda f: f.__setitem__(r.IP_OFF + 6, 0x20)), "bad_ip_header")
    expect_drop("bad-bth-opcode-rc-send-first",
                patched(good, lambda f: f.__setitem__(r.BTH_OFF, 0x00)), "bad_bth_opcode")
    expect_drop("rc-send-only-not-a-connect",
                patched(good, lambda f: f.__setitem__(r.BTH_OFF, 0x04)), "bad_connect")
    expect_drop("bad-bth-tver",
                patched(good, lambda f: f.__setitem__(r.BTH_OFF + 1, f[r.BTH_OFF + 1] | 1)),
                "bad_bth_version")
    expect_drop("reth-dma-length-mismatch",
                patched(good, lambda f: struct.pack_into(
                    "!I", f, r.EXT_OFF + 12, struct.unpack_from("!I", f, r.EXT_OFF + 12)[0] + 1)),
                "length_mismatch")
    expect_drop("wrong-destination-ip",
                patched(good, lambda f: f.__setitem__(slice(r.IP_OFF + 16, r.IP_OFF + 20),
                                                      r.ip4("127.0.0.9"))), "wrong_destination")
    expect_drop("unknown-qp-999", req(r.batch(next_batch(), [r.op_get(K)]), qpn=999),
                "unknown_qp")
    expect_drop("wrong-rkey", req(r.batch(next_batch(), [r.op_get(K)]), rkey=rkey ^ 0x1),
                "bad_rkey")
    pl = r.batch(next_batch(), [r.op_get(K)])
    expect_drop("reth-va-below-region", req(pl, va=va0 - 4096), "bad_va")
    expect_drop("reth-va-past-region-end", req(pl, va=va0 + vlen - len(pl) + 1), "bad_va")
    expect_drop("reth-va-next-psns-slot",
                req(pl, va=r.slot_va(va0, state["slot"], credits, state["psn"] + 1)), "bad_va")

    # -- 6. KV payload errors (answered) -----------------------------------------------
    K2, V2, K3 = b"e2e-k2", b"v2", b"e2e-k3"
    b = next_batch()
    expect["op_errors"] += 1
    # PUT k2, then op with undefined opcode 31, then PUT k3 (must not be executed)
    expect_reply("unknown-kv-opcode",
                 req(r.batch(b, [r.op_put(K2, V2), r.op_raw(31, K), r.op_put(K3, V2)])), b,
                 [(r.ST_OK, b""), (r.ST_UNKNOWN_OPCODE, b"")])
    b = next_batch()
    expect["op_errors"] += 1
    # count says 3 ops, the payload holds one GET
    expect_reply("op-count-beyond-payload", req(r.batch(b, [r.op_get(K)], count=3)), b,
                 [(r.ST_OK, V), (r.ST_MALFORMED, b"")])
    # a batch header with a wrong magic takes its PSN and is answered with one
    # MALFORMED result under its batch id (PROTOCOL.md 3.3)
    b = next_batch()
    bad_magic = bytearray(r.batch(b, [r.op_get(K)]))
    bad_magic[0] = 0x4C
    expect["op_errors"] += 1
    expect_reply("bad-batch-magic", req(bytes(bad_magic)), b, [(r.ST_MALFORMED, b"")])

    # -- 7. transport (PROTOCOL.md 6.3) ----------------------------------------------
    # A duplicate of the PUT served first: not executed again, its response re-sent
    # byte for byte (same response PSN, same ICRC).
    first_psn = min(sent, key=lambda p: (p - state["psn"]) & 0xFFFFFF)
    dup_req, dup_resp = sent[first_psn]
    got = exchange(dup_req)
    expect["replays"] += 1
    result("psn-duplicate-replayed",
           len(got) == 1 and got[0]["raw"] == dup_resp,
           "the saved response, byte for byte" if len(got) == 1 and got[0]["raw"] == dup_resp
           else f"got {[g['kind'] for g in got]}")
    # A request ahead of the expected PSN: one NAK PSN sequence error naming it, then
    # silence for the rest of the gap.
    e = state["psn"]
    expect_ack("psn-ahead-nak", req(r.batch(next_batch(), [r.op_get(K)]), psn=e + 2),
               r.NAK_PSN_SEQ, e, "psn_ahead")
    expect_drop("psn-ahead-again-silent", req(r.batch(next_batch(), [r.op_get(K)]), psn=e + 3),
                "psn_ahead")
    # Older than the window: dropped.
    old = (e - credits - 1) & 0xFFFFFF
    expect_drop("psn-older-than-window", req(r.batch(next_batch(), [r.op_get(K)]), psn=old),
                "psn_duplicate")
    # Serving resumes at the expected PSN.
    b = next_batch()
    expect_reply("resume-at-expected-psn", req(r.batch(b, [r.op_get(K)])), b, [(r.ST_OK, V)])
    # Reconnection: a larger nonce starts a new incarnation half the PSN space away;
    # the old incarnation's next PSN is then an old duplicate.
    old_e = state["psn"]
    connect("reconnect-moves-psns", nonce + 10, want_request_psn=(old_e + (1 << 23)) & 0xFFFFFF)
    expect_drop("old-incarnation-request", req(r.batch(next_batch(), [r.op_get(K)]), psn=old_e),
                "psn_duplicate")

    # -- 8. the store is intact ------------------------------------------------------
    b = next_batch()
    expect_reply("get-after-malformed", req(r.batch(b, [r.op_get(K)])), b, [(r.ST_OK, V)])
    b = next_batch()
    expect_reply("ops-before-bad-op-ran-after-not",
                 req(r.batch(b, [r.op_get(K2), r.op_get(K3)])), b,
                 [(r.ST_OK, V2), (r.ST_NOT_FOUND, b"")])
    # COMPARE_DELETE (PROTOCOL.md 3.2) answers the value the key held and deletes the
    # key only when that is the op's value.
    b = next_batch()
    expect_reply("compare-delete-other-value-kept",
                 req(r.batch(b, [r.op_compare_delete(K2, b"not-" + V2), r.op_get(K2)])), b,
                 [(r.ST_OK, V2), (r.ST_OK, V2)])
    b = next_batch()
    expect_reply("compare-delete-own-value",
                 req(r.batch(b, [r.op_compare_delete(K2, V2), r.op_get(K2),
                                 r.op_compare_delete(K2, V2)])), b,
                 [(r.ST_OK, V2), (r.ST_NOT_FOUND, b""), (r.ST_NOT_FOUND, b"")])

    # -- 9. opened QPs (PROTOCOL.md 6.1, "Opened QPs"; 5) -----------------------------
    onon = time.time_ns() ^ 0x5A5A
    got = exchange(r.open_frame(CLIENT_MAC, smac, CLIENT_IP, sip, 0, onon))
    expect["accepts_sent"] += 1
    o = got[0] if len(got) == 1 and got[0]["kind"] == "accept" else None
    if o is None or "opened_qpn" not in o:
        result("open", False, f"expected 1 opened ACCEPT, got {got}")
    else:
        oq, ok_, osec = o["opened_qpn"], o["opened_rkey"], o["secret"]
        report("open", [("payload_len", o["payload_len"], 56), ("flags", o["flags"], 0x02),
                        ("nonce", o["nonce"], onon), ("dest_qp = opened QPN", o["dqpn"], oq),
                        ("QPN in 0x800000..0xFFFFFF", oq >= 0x800000, True),
                        ("icrc_ok", o["icrc_ok"], True), ("credits", o["credits"], credits)],
               f"ACCEPT 56 B: QPN 0x{oq:06x}, request PSN {o['request_psn']}")
        again = exchange(r.open_frame(CLIENT_MAC, smac, CLIENT_IP, sip, 0, onon))
        expect["accepts_sent"] += 1
        result("open-repeated-same-nonce", len(again) == 1 and again[0]["raw"] == o["raw"],
               "the same ACCEPT, byte for byte")
        opsn, oslot = o["request_psn"], o["slot_size"]

        def oreq(payload, psn, rkey=ok_):
            va = r.slot_va(o["region_va"], oslot, credits, psn)
            return r.request_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, psn, va, rkey, payload)
        b = next_batch()
        got = exchange(oreq(r.batch(b, [r.op_get(K)]), opsn))
        expect["requests"] += 1
        expect["responses"] += 1
        result("opened-request", len(got) == 1 and got[0]["kind"] == "response"
               and got[0]["results"] == [(r.ST_OK, V)] and got[0]["dqpn"] == oq,
               "answered on the opened QP")
        expect_drop("opened-connect-refused",
                    r.connect_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, ok_, onon + 1),
                    "bad_secret")
        expect_drop("opened-resume-without-secret",
                    r.resume_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, ok_, onon, opsn + 1),
                    "bad_secret")
        expect_drop("opened-resume-wrong-secret",
                    r.resume_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, ok_, onon, opsn + 1,
                                   osec ^ 1), "bad_secret")
        expect_drop("opened-close-wrong-secret",
                    r.close_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, ok_, onon, ~osec & (2**64 - 1)),
                    "bad_secret")
        got = exchange(r.close_frame(CLIENT_MAC, smac, CLIENT_IP, sip, oq, ok_, onon, osec))
        result("opened-close", not got, "closed, not answered")
        p2 = (opsn + 1) & 0xFFFFFF
        got = exchange(oreq(r.batch(next_batch(), [r.op_get(K)]), p2))
        expect["drops"]["unknown_qp"] = expect["drops"].get("unknown_qp", 0) + 1
        expect["naks_sent"] += 1
        result("request-after-close-nak",
               len(got) == 1 and got[0]["kind"] == "ack" and got[0]["syndrome"] == r.NAK_INVALID
               and got[0]["psn"] == p2 and got[0]["dqpn"] == oq,
               f"NAK invalid request for PSN {p2}")
        bad_open = bytearray(r.open_frame(CLIENT_MAC, smac, CLIENT_IP, sip, 0, onon + 2))
        bad_open[r.EXT_OFF + 7] = 1  # a reserved byte of the OPEN
        r.fix_icrc(bad_open)
        expect_drop("open-reserved-byte-set", bytes(bad_open), "bad_connect")

    json.dump(expect, open(a.expect, "w"), indent=1, sort_keys=True)
    print(f"inject: {state['cases'] - state['fails']}/{state['cases']} cases passed")
    return 1 if state["fails"] else 0


def main_check(a):
    exp = json.load(open(a.expect))
    st = json.load(open(a.stats))
    fails = 0

    def chk(name, have, want):
        nonlocal fails
        ok = have == want
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'}: malformed/stats {name} = {have} (expected {want})")

    for reason, n in sorted(exp["drops"].items()):
        chk(f"drop_{reason}", st.get(f"drop_{reason}", 0), n)
    others = {k: v for k, v in st.items()
              if k.startswith("drop_") and k[5:] not in exp["drops"] and v}
    chk("other drop counters", others, {})
    for k in ("op_errors", "requests", "responses", "rx_packets", "replays", "naks_sent",
              "accepts_sent"):
        chk(k, st.get(k), exp[k])
    # net_tap keeps its rx ring filled: mbufs in use at exit must equal the count at
    # start ("dataplane ready (mbufs in use N)"), i.e. no response/request mbuf leaked.
    chk("mbufs_in_use", st.get("mbufs_in_use"), a.mbuf_baseline)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--config", required=True)
    p.add_argument("--iface", required=True)
    p.add_argument("--expect", required=True)
    p = sub.add_parser("check")
    p.add_argument("--expect", required=True)
    p.add_argument("--stats", required=True)
    p.add_argument("--mbuf-baseline", type=int, default=0)
    a = ap.parse_args()
    return main_run(a) if a.cmd == "run" else main_check(a)


if __name__ == "__main__":
    sys.exit(main())
