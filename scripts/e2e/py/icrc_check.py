#!/usr/bin/env python3
"""Verifies the ICRC of EVERY frame of a pcap, twice and independently:

  1. rocev2.icrc_of(): hand-written from docs/PROTOCOL.md 2.7 with zlib.crc32;
  2. scapy's RoCE contrib (BTH.compute_icrc), which rebuilds the pseudo-header itself.

Both must equal the 4 bytes on the wire (LSB first). Before touching the capture,
both are checked against the known-good worked examples of PROTOCOL.md section 8
(request, response, CONNECT, NAK). Also checks per frame: IPv4 checksum, UDP length
= IP total length - 20, BTH opcode is one protocol v2 uses (0x0A request, 0x04
CONNECT, 0x64 response or ACCEPT, 0x11 ACK/NAK), and counts response frames that
appear more than once byte for byte (replays from the server's cache).

usage: icrc_check.py FILE.pcap [--min-frames N] [--min-replayed N]
prints one summary line; exit 0 if every frame passed, 1 otherwise.
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocev2 as r  # noqa: E402

from scapy.utils import RawPcapReader  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402


def scapy_icrc(frame):
    """scapy's ICRC of a frame as the int carried on the wire (or None if no BTH)."""
    p = Ether(frame)
    if BTH not in p:
        return None
    return struct.unpack("<I", p[BTH].compute_icrc(None))[0]


def self_test():
    for name, f in (("doc request", r.DOC_REQUEST), ("doc response", r.DOC_RESPONSE),
                    ("doc connect", r.DOC_CONNECT), ("doc nak", r.DOC_NAK)):
        wire, mine, sc = r.icrc_on_wire(f), r.icrc_of(f), scapy_icrc(f)
        if not (wire == mine == sc):
            print(f"FAIL: icrc self-test on {name}: wire {wire:#x} mine {mine:#x} scapy {sc}")
            return False
    # and both must notice a single flipped payload bit
    f = bytearray(r.DOC_REQUEST)
    f[r.REQ_PAYLOAD_OFF + 3] ^= 0x01
    f = bytes(f)
    if r.icrc_of(f) == r.icrc_on_wire(f) or scapy_icrc(f) == r.icrc_on_wire(f):
        print("FAIL: icrc self-test: a corrupted frame was not detected")
        return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--min-frames", type=int, default=1)
    ap.add_argument("--min-replayed", type=int, default=0)
    a = ap.parse_args()
    if not self_test():
        return 1
    n = bad = 0
    kinds = {r.OP_RC_WRITE_ONLY: 0, r.OP_UD_SEND_ONLY: 0, r.OP_RC_SEND_ONLY: 0, r.OP_RC_ACK: 0}
    seen_resp = {}
    shown = 0
    with RawPcapReader(a.pcap) as rd:
        for i, (data, _meta) in enumerate(rd, 1):
            f = bytes(data)
            n += 1
            why = []
            try:
                if len(f) < r.EXT_OFF + r.ICRC_LEN or f[12:14] != b"\x08\x00":
                    why.append("not IPv4/too short")
                else:
                    ip_total = struct.unpack_from("!H", f, r.IP_OFF + 2)[0]
                    if r.IP_OFF + ip_total > len(f):
                        why.append("IP total length beyond frame")
                    else:
                        wire, mine, sc = r.icrc_on_wire(f), r.icrc_of(f), scapy_icrc(f)
                        if mine != wire:
                            why.append(f"icrc wire {wire:#010x} != computed {mine:#010x}")
                        if sc != wire:
                            why.append(f"icrc wire {wire:#010x} != scapy {sc}")
                    if not r.ip_checksum_ok(f):
                        why.append("bad IPv4 checksum")
                    if struct.unpack_from("!H", f, r.UDP_OFF + 4)[0] != ip_total - r.IP_LEN:
                        why.append("UDP length != IP total length - 20")
                    op = f[r.BTH_OFF]
                    if op in kinds:
                        kinds[op] += 1
                        if op == r.OP_UD_SEND_ONLY and f[r.RESP_PAYLOAD_OFF] == 0x52:
                            key = f[:r.IP_OFF + ip_total]
                            seen_resp[key] = seen_resp.get(key, 0) + 1
                    else:
                        why.append(f"unexpected BTH opcode {op:#x}")
            except Exception as e:  # a frame we cannot even parse is a failure
                why.append(f"exception {e!r}")
            if why:
                bad += 1
                if shown < 10:
                    shown += 1
                    print(f"  frame {i} ({len(f)} B): " + "; ".join(why))
    replayed = sum(c - 1 for c in seen_resp.values() if c > 1)
    ok = bad == 0 and n >= a.min_frames and replayed >= a.min_replayed
    print(f"{'PASS' if ok else 'FAIL'}: icrc: {n} frames ({kinds[r.OP_RC_WRITE_ONLY]} requests, "
          f"{kinds[r.OP_UD_SEND_ONLY]} responses/ACCEPTs, {kinds[r.OP_RC_SEND_ONLY]} CONNECTs, "
          f"{kinds[r.OP_RC_ACK]} ACK/NAKs; {replayed} response frames sent again byte for byte), "
          f"{bad} bad; ICRC recomputed by hand and by scapy (both agree on PROTOCOL.md's "
          f"worked examples)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
