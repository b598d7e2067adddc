#!/usr/bin/env python3
"""Split a pcap (Ethernet/IPv4/TCP) into the host→target byte streams of each TCP connection to
PORT and write each as OUT/linux-6.1-<n>-<dgst>.bin, where <dgst> says which digests its ICReq
asked for. Payloads are ordered by sequence number and de-duplicated (retransmissions)."""
import os
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield data[off:off + incl]
        off += incl


def main():
    path, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    streams = {}
    for p in packets(path):
        if len(p) < 14 or struct.unpack("!H", p[12:14])[0] != 0x0800:
            continue
        ip = p[14:]
        ihl = (ip[0] & 0xF) * 4
        if ip[9] != 6:
            continue
        tot = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:tot]
        sport, dport, seq = struct.unpack("!HHI", tcp[:8])
        doff = (tcp[12] >> 4) * 4
        payload = tcp[doff:]
        if dport != port or not payload:
            continue
        streams.setdefault(sport, {})[seq] = payload
    n = 0
    for sport in sorted(streams):
        segs = streams[sport]
        first = min(segs)
        buf = bytearray()
        for seq in sorted(segs):
            rel = (seq - first) & 0xFFFFFFFF
            if rel > len(buf):
                break  # a gap: keep only the contiguous start
            buf[rel:rel + len(segs[seq])] = segs[seq]
        if len(buf) < 128 or buf[0] != 0:
            continue
        dgst = {0: "plain", 1: "hdgst", 2: "ddgst", 3: "hdgst-ddgst"}[buf[11] & 3]
        name = os.path.join(out, f"linux-6.1-{n}-{dgst}.bin")
        with open(name, "wb") as f:
            f.write(bytes(buf[:65536]))
        print(f"{name}: {min(len(buf), 65536)} bytes (source port {sport})")
        n += 1
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())
