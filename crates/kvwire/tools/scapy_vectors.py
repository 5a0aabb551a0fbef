#!/usr/bin/env python3
"""Independent RoCEv2 test vectors built with scapy's RoCE contrib module.

The KV payload bytes are written by hand from docs/PROTOCOL.md (not by
kvwire), and scapy computes the IPv4 checksum and the ICRC. The printed
hex strings are pinned in crates/kvwire/src/frame.rs (tests::SCAPY_*).

    pip install scapy && python3 crates/kvwire/tools/scapy_vectors.py
"""
import struct
from scapy.layers.l2 import Ether
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw
from scapy.contrib.roce import BTH

def pad4(b):
    n = (4 - len(b) % 4) % 4
    return b + b"\0" * n, n

# Request payload: header 'K' v1 count=2 batch=0x01020304,
# PUT (op 0x02, klen 5, vlen 6) "hello" "world!", GET with COPY_SIZES (0x81) "hello".
req = bytes([0x4B, 1]) + struct.pack("!HI", 2, 0x01020304)
req += bytes([0x02, 5]) + struct.pack("!H", 6) + b"hello" + b"world!"
req += bytes([0x81]) + b"hello"
reth = struct.pack("!QII", 0x10000, 0x1234ABCD, len(req))
body, pad = pad4(req)
p = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
     / IP(src="10.0.0.1", dst="10.0.0.2", ttl=64, tos=0, id=0, flags="DF")
     / UDP(sport=0xC000, dport=4791, chksum=0)
     / BTH(opcode=0x0A, padcount=pad, pkey=0xFFFF, dqpn=0x11, psn=0x100)
     / Raw(reth + body))
print("request ", bytes(p).hex())

# Response payload: 'R' v1 count=2 batch=0x01020304 first=0 flags=0 rsv=0,
# OK (no value), OK "world!".
resp = bytes([0x52, 1]) + struct.pack("!HIHBB", 2, 0x01020304, 0, 0, 0)
resp += bytes([0]) + struct.pack("!H", 0)
resp += bytes([0]) + struct.pack("!H", 6) + b"world!"
deth = struct.pack("!II", 0x11111111, 0x01)
body, pad = pad4(resp)
p = (Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
     / IP(src="10.0.0.2", dst="10.0.0.1", ttl=64, tos=0, id=0, flags="DF")
     / UDP(sport=0xC000, dport=4791, chksum=0)
     / BTH(opcode=0x64, padcount=pad, pkey=0xFFFF, dqpn=0x11, psn=0x100)
     / Raw(deth + body))
print("response", bytes(p).hex())
