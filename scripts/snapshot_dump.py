#!/usr/bin/env python3
"""Prints the KVs of a snapshot file (`ctlplane snapshot save`) as JSON lines
{"key": HEX, "value": HEX}, applying its records in order (the last one of a key wins),
after checking the header, every block's checksums and the trailer's counts.
Format: crates/kvrepl/src/snapshot.rs. Usage: scripts/snapshot_dump.py FILE [--key HEX]
(--key: print only that key's value as hex, exit 1 if absent)."""
import struct
import sys


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def read(path):
    d = open(path, "rb").read()
    if d[:8] != b"KVDSNAP\0":
        raise ValueError("not a snapshot (magic)")
    if struct.unpack_from("<I", d, 60)[0] != crc32c(d[:60]):
        raise ValueError("corrupt header")
    kv, pos, blocks, records = {}, 64, 0, 0
    while True:
        tag = d[pos:pos + 4]
        if tag == b"KVT\x01":
            _, nb, nr, fcrc = struct.unpack_from("<IQQI", d, pos + 4)
            if (nb, nr) != (blocks, records) or fcrc != crc32c(d[:pos + 24]):
                raise ValueError("corrupt trailer")
            return kv
        if tag != b"KVB\x01":
            raise ValueError(f"bad block tag at {pos}")
        n, plen, _end, hcrc, pcrc = struct.unpack_from("<IIQII", d, pos + 4)
        if hcrc != crc32c(d[pos:pos + 20]):
            raise ValueError(f"corrupt block header at {pos}")
        p = d[pos + 28:pos + 28 + plen]
        if len(p) != plen or pcrc != crc32c(p):
            raise ValueError(f"corrupt block at {pos}")
        i = 0
        for _ in range(n):
            kind, klen, vlen = struct.unpack_from("<BBH", p, i)
            key, val = p[i + 4:i + 4 + klen], p[i + 4 + klen:i + 4 + klen + vlen]
            i += 4 + klen + vlen
            if kind == 1:
                kv[key] = val
            elif kind == 2:
                kv.pop(key, None)
        blocks, records = blocks + 1, records + n
        pos += 28 + plen


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    kv = read(args[0])
    if len(args) == 3 and args[1] == "--key":
        v = kv.get(bytes.fromhex(args[2]))
        if v is None:
            sys.exit(1)
        print(v.hex())
        return
    import json
    for k, v in kv.items():
        print(json.dumps({"key": k.hex(), "value": v.hex()}))


if __name__ == "__main__":
    main()
