"""Hand-written RoCEv2 / KV-Direct framing helpers for the end-to-end tests.

Written from docs/PROTOCOL.md only (no kvwire code): byte offsets, the ICRC rule
(section 2.7), the KV batch request/response formats (sections 3, 4), protocol v2's
CONNECT/ACCEPT and RC Acknowledge packets and the request-slot rule (section 6).
Used by icrc_check.py (pcap verification) and inject.py (malformed-frame injection).
"""
import hashlib
import hmac
import struct
import zlib

ETH_LEN = 14
IP_OFF = 14
IP_LEN = 20
UDP_OFF = IP_OFF + IP_LEN          # 34
UDP_LEN = 8
BTH_OFF = UDP_OFF + UDP_LEN        # 42
BTH_LEN = 12
EXT_OFF = BTH_OFF + BTH_LEN        # 54
RETH_LEN = 16
DETH_LEN = 8
ICRC_LEN = 4
REQ_PAYLOAD_OFF = EXT_OFF + RETH_LEN   # 70
RESP_PAYLOAD_OFF = EXT_OFF + DETH_LEN  # 62

ROCE_PORT = 4791
OP_RC_WRITE_ONLY = 0x0A
OP_UD_SEND_ONLY = 0x64
OP_RC_SEND_ONLY = 0x04
OP_RC_ACK = 0x11
AETH_LEN = 4

# AETH syndromes (PROTOCOL.md 2.6a)
NAK_PSN_SEQ = 0x60
NAK_INVALID = 0x61
RNR_NAK = 0x20      # | timer

KV_GET, KV_PUT, KV_DELETE, KV_COMPARE_DELETE = 1, 2, 3, 9
ST_OK, ST_NOT_FOUND, ST_MALFORMED, ST_UNKNOWN_OPCODE = 0, 1, 5, 6

# The worked example of docs/PROTOCOL.md section 8 (a known-good request and response).
DOC_REQUEST = bytes.fromhex(
    "02000000000202000000000108004500005c000040004011268f0a0000010a000002c00012b7"
    "004800000a30ffff000000110000010000000000000100001234abcd0000001d4b0100020102"
    "03040205000668656c6c6f776f726c64218168656c6c6f000000e1eb536b")
DOC_RESPONSE = bytes.fromhex(
    "02000000000102000000000208004500004c000040004011269f0a0000020a000001c00012b7"
    "003800006400ffff000000110000010011111111000000015201000201020304000000000000"
    "00000006776f726c6421283ada84")
# Protocol v2's worked examples (PROTOCOL.md 8.1 and 8.3): a CONNECT and a NAK.
DOC_CONNECT = bytes.fromhex(
    "02000000000202000000000108004500003c00004000401126af0a0000010a000002c00012b7"
    "002800000400ffff0000001100000000430201001234abcd0102030405060708f7712cf3")
DOC_NAK = bytes.fromhex(
    "02000000000102000000000208004500003000004000401126bb0a0000020a000001c00012b7"
    "001c00001100ffff0000001100000101600000 00e1abdc12".replace(" ", ""))


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def ip_checksum(hdr):
    """RFC 791 header checksum of a 20-byte header whose checksum field is zero."""
    s = 0
    for i in range(0, len(hdr), 2):
        s += (hdr[i] << 8) | hdr[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip_checksum_ok(frame):
    hdr = frame[IP_OFF:IP_OFF + IP_LEN]
    s = 0
    for i in range(0, IP_LEN, 2):
        s += (hdr[i] << 8) | hdr[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def icrc_of(frame, ip_total=None):
    """ICRC (as the int the wire carries LSB first) of a RoCEv2-over-IPv4 frame,
    per PROTOCOL.md 2.7: CRC-32 over 8 x 0xFF, IPv4 header with TOS/TTL/checksum
    all-ones, UDP header with checksum all-ones, BTH with byte 4 = 0xFF, then the
    rest up to (excluding) the ICRC. The covered range ends 4 bytes before the end
    of the IP packet (IP total length), not of the frame (Ethernet padding)."""
    if ip_total is None:
        ip_total = struct.unpack_from("!H", frame, IP_OFF + 2)[0]
    end = IP_OFF + ip_total - ICRC_LEN
    ip = bytearray(frame[IP_OFF:IP_OFF + IP_LEN])
    ip[1] = 0xFF                 # TOS
    ip[8] = 0xFF                 # TTL
    ip[10:12] = b"\xff\xff"      # header checksum
    udp = bytearray(frame[UDP_OFF:UDP_OFF + UDP_LEN])
    udp[6:8] = b"\xff\xff"       # UDP checksum
    bth = bytearray(frame[BTH_OFF:BTH_OFF + BTH_LEN])
    bth[4] = 0xFF                # reserved / FECN / BECN
    covered = b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth) + frame[EXT_OFF:end]
    return zlib.crc32(covered) & 0xFFFFFFFF


def icrc_on_wire(frame):
    ip_total = struct.unpack_from("!H", frame, IP_OFF + 2)[0]
    end = IP_OFF + ip_total
    return struct.unpack("<I", frame[end - ICRC_LEN:end])[0]


def fix_ip_checksum(f):
    """Recomputes the IPv4 header checksum in place (bytearray)."""
    f[IP_OFF + 10:IP_OFF + 12] = b"\0\0"
    struct.pack_into("!H", f, IP_OFF + 10, ip_checksum(bytes(f[IP_OFF:IP_OFF + IP_LEN])))


def fix_icrc(f):
    """Rewrites the ICRC in place from the frame's IP total length."""
    ip_total = struct.unpack_from("!H", f, IP_OFF + 2)[0]
    end = IP_OFF + ip_total
    struct.pack_into("<I", f, end - ICRC_LEN, icrc_of(bytes(f), ip_total))


# ---- KV batch payloads (PROTOCOL.md section 3) -------------------------------------

def batch(batch_id, ops, count=None):
    """Request payload: header + already-encoded ops (count defaults to len(ops))."""
    n = len(ops) if count is None else count
    return bytes([0x4B, 1]) + struct.pack("!HI", n, batch_id) + b"".join(ops)


def op_put(key, value):
    return bytes([KV_PUT, len(key)]) + struct.pack("!H", len(value)) + key + value


def op_get(key):
    return bytes([KV_GET, len(key)]) + key


def op_delete(key):
    return bytes([KV_DELETE, len(key)]) + key


def op_compare_delete(key, expected):
    """COMPARE_DELETE (PROTOCOL.md 3.2): carries a value, like PUT."""
    return (bytes([KV_COMPARE_DELETE, len(key)]) + struct.pack("!H", len(expected))
            + key + expected)


def op_raw(opcode, key):
    """An op byte with an arbitrary opcode (e.g. an undefined one), a key length and key."""
    return bytes([opcode, len(key)]) + key


def request_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, psn, va, rkey, payload,
                  udp_sport=0xC000, dma_len=None):
    """A complete, valid request frame (PROTOCOL.md 2.1-2.7), built by hand."""
    pad = (4 - len(payload) % 4) % 4
    body = payload + b"\0" * pad
    ip_total = IP_LEN + UDP_LEN + BTH_LEN + RETH_LEN + len(body) + ICRC_LEN
    f = bytearray()
    f += mac(dst_mac) + mac(src_mac) + b"\x08\x00"
    f += struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_total, 0, 0x4000, 64, 17, 0,
                     ip4(src_ip), ip4(dst_ip))
    f += struct.pack("!HHHH", udp_sport, ROCE_PORT, ip_total - IP_LEN, 0)
    f += struct.pack("!BBHB", OP_RC_WRITE_ONLY, pad << 4, 0xFFFF, 0) + struct.pack("!I", qpn)[1:]
    f += struct.pack("!I", psn & 0xFFFFFF)
    f += struct.pack("!QII", va, rkey, len(payload) if dma_len is None else dma_len)
    f += body
    f += b"\0\0\0\0"
    fix_ip_checksum(f)
    fix_icrc(f)
    return bytes(f)


def parse_response(frame):
    """Decodes a UD SEND Only response frame; returns a dict, or None if it is not one.
    Checks IP checksum and ICRC and reports them."""
    if len(frame) < RESP_PAYLOAD_OFF + 12 + ICRC_LEN or frame[12:14] != b"\x08\x00":
        return None
    if frame[IP_OFF + 9] != 17 or struct.unpack_from("!H", frame, UDP_OFF + 2)[0] != ROCE_PORT:
        return None
    if frame[BTH_OFF] != OP_UD_SEND_ONLY:
        return None
    ip_total = struct.unpack_from("!H", frame, IP_OFF + 2)[0]
    pad = (frame[BTH_OFF + 1] >> 4) & 3
    end = IP_OFF + ip_total - ICRC_LEN - pad
    p = frame[RESP_PAYLOAD_OFF:end]
    magic, ver, count, batch_id, first, flags, _ = struct.unpack_from("!BBHIHBB", p, 0)
    results, off = [], 12
    for _ in range(count):
        st = p[off]
        vl = struct.unpack_from("!H", p, off + 1)[0]
        results.append((st, bytes(p[off + 3:off + 3 + vl])))
        off += 3 + vl
    return {
        "dst_mac": frame[0:6], "src_mac": frame[6:12],
        "dqpn": struct.unpack("!I", b"\0" + frame[BTH_OFF + 5:BTH_OFF + 8])[0],
        "psn": struct.unpack("!I", b"\0" + frame[BTH_OFF + 9:BTH_OFF + 12])[0],
        "qkey": struct.unpack_from("!I", frame, EXT_OFF)[0],
        "src_qp": struct.unpack("!I", b"\0" + frame[EXT_OFF + 5:EXT_OFF + 8])[0],
        "magic": magic, "version": ver, "batch_id": batch_id, "first": first,
        "flags": flags, "results": results,
        "ip_ok": ip_checksum_ok(frame),
        "icrc_ok": icrc_of(frame, ip_total) == icrc_on_wire(frame),
        "udp_len_ok": struct.unpack_from("!H", frame, UDP_OFF + 4)[0] == ip_total - IP_LEN,
    }


# ---- protocol v2 transport (PROTOCOL.md section 6) ----------------------------------

def slot_va(region_va, slot_size, credits, psn):
    """RETH VA of request PSN `psn` (6.2)."""
    return region_va + (psn % credits) * slot_size


def _lower(src_mac, dst_mac, src_ip, dst_ip, opcode, qpn, psn, body_len, pad=0):
    ip_total = IP_LEN + UDP_LEN + BTH_LEN + body_len + ICRC_LEN
    f = bytearray()
    f += mac(dst_mac) + mac(src_mac) + b"\x08\x00"
    f += struct.pack("!BBHHHBBH4s4s", 0x45, 0, ip_total, 0, 0x4000, 64, 17, 0,
                     ip4(src_ip), ip4(dst_ip))
    f += struct.pack("!HHHH", 0xC000, ROCE_PORT, ip_total - IP_LEN, 0)
    f += struct.pack("!BBHB", opcode, pad << 4, 0xFFFF, 0) + struct.pack("!I", qpn)[1:]
    f += struct.pack("!I", psn & 0xFFFFFF)
    return f


def connect_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, rkey, nonce):
    """A CONNECT (RC SEND Only, 16-byte payload, 6.1)."""
    payload = bytes([0x43, 2, 1, 0]) + struct.pack("!IQ", rkey, nonce)
    f = _lower(src_mac, dst_mac, src_ip, dst_ip, OP_RC_SEND_ONLY, qpn, 0, len(payload))
    f += payload + b"\0\0\0\0"
    fix_ip_checksum(f)
    fix_icrc(f)
    return bytes(f)


def _join_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, payload):
    f = _lower(src_mac, dst_mac, src_ip, dst_ip, OP_RC_SEND_ONLY, qpn, 0, len(payload))
    f += payload + b"\0\0\0\0"
    fix_ip_checksum(f)
    fix_icrc(f)
    return bytes(f)


CM_QPN = 1  # the connection manager's QP: OPENs go there (6.1)


def open_frame(src_mac, dst_mac, src_ip, dst_ip, partition, nonce):
    """An OPEN (kind 0x04, 16 bytes, to QP 1; 6.1, "Opened QPs")."""
    payload = bytes([0x43, 2, 4, 0]) + struct.pack("!HHQ", partition, 0, nonce)
    return _join_frame(src_mac, dst_mac, src_ip, dst_ip, CM_QPN, payload)


def secret_proof(secret, message):
    """The proof of connection secret `secret` a RESUME or CLOSE carries (6.1): the
    first 8 bytes of HMAC-SHA256 keyed with the secret's 8 big-endian bytes over the
    payload bytes before the proof."""
    return hmac.new(struct.pack("!Q", secret), message, hashlib.sha256).digest()[:8]


def close_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, rkey, nonce, secret):
    """A CLOSE (kind 0x05, 24 bytes) of opened QP `qpn`, with the proof of its secret."""
    head = bytes([0x43, 2, 5, 0]) + struct.pack("!IQ", rkey, nonce)
    return _join_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, head + secret_proof(secret, head))


def resume_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, rkey, nonce, next_psn, secret=None):
    """A RESUME (kind 0x03): 20 bytes, or 28 with the proof of an opened QP's secret."""
    payload = bytes([0x43, 2, 3, 0]) + struct.pack("!IQI", rkey, nonce, next_psn)
    if secret is not None:
        payload += secret_proof(secret, payload)
    return _join_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, payload)


def parse_server_frame(frame):
    """Decodes what a server sends: a response (dict with kind 'response', as
    parse_response), an ACCEPT (kind 'accept') or an RC Acknowledge (kind 'ack');
    None for anything else. IP checksum and ICRC are checked and reported."""
    if len(frame) < EXT_OFF + ICRC_LEN or frame[12:14] != b"\x08\x00":
        return None
    if frame[IP_OFF + 9] != 17 or struct.unpack_from("!H", frame, UDP_OFF + 2)[0] != ROCE_PORT:
        return None
    op = frame[BTH_OFF]
    ip_total = struct.unpack_from("!H", frame, IP_OFF + 2)[0]
    common = {
        "raw": bytes(frame[:IP_OFF + ip_total]),
        "dst_mac": frame[0:6], "src_mac": frame[6:12],
        "dqpn": struct.unpack("!I", b"\0" + frame[BTH_OFF + 5:BTH_OFF + 8])[0],
        "psn": struct.unpack("!I", b"\0" + frame[BTH_OFF + 9:BTH_OFF + 12])[0],
        "ip_ok": ip_checksum_ok(frame),
        "icrc_ok": icrc_of(frame, ip_total) == icrc_on_wire(frame),
    }
    if op == OP_RC_ACK:
        if ip_total != IP_LEN + UDP_LEN + BTH_LEN + AETH_LEN + ICRC_LEN:
            return None
        syn = frame[EXT_OFF]
        msn = struct.unpack("!I", b"\0" + frame[EXT_OFF + 1:EXT_OFF + 4])[0]
        return dict(common, kind="ack", syndrome=syn, msn=msn)
    if op != OP_UD_SEND_ONLY:
        return None
    if frame[RESP_PAYLOAD_OFF] == 0x43:
        p = frame[RESP_PAYLOAD_OFF:RESP_PAYLOAD_OFF + 40]
        magic, ver, kind, _, credits, _, nonce, rpsn, spsn, slot, _, va = struct.unpack(
            "!BBBBHHQIIIIQ", p)
        flags = frame[RESP_PAYLOAD_OFF + 3]
        acc = dict(common, kind="accept", version=ver, accept_kind=kind, credits=credits,
                   nonce=nonce, request_psn=rpsn & 0xFFFFFF, response_psn=spsn & 0xFFFFFF,
                   slot_size=slot, region_va=va, flags=flags,
                   payload_len=ip_total - (IP_LEN + UDP_LEN + BTH_LEN + 8 + ICRC_LEN),
                   qkey=struct.unpack_from("!I", frame, EXT_OFF)[0])
        if flags & 0x02:  # opened: QPN, R_Key, secret follow (6.1)
            qpn, rkey, secret = struct.unpack_from("!IIQ", frame, RESP_PAYLOAD_OFF + 40)
            acc.update(opened_qpn=qpn & 0xFFFFFF, opened_rkey=rkey, secret=secret)
        return acc
    resp = parse_response(frame)
    if resp is None:
        return None
    return dict(common, kind="response", **{k: v for k, v in resp.items() if k not in common})
