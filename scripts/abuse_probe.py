#!/usr/bin/env python3
"""Idle and half-handshake connection abuse against a running `ebof serve`; prints figures.

Not a test (the assertions live in the cargo tests): a probe that reproduces issue 11's
measurement so before/after can be compared the same way.

    scripts/abuse_probe.py --pid PID --port PORT [--idle 2000] [--half 200] [--hold 20]

Opens IDLE connections that send nothing and HALF that send 64 of an ICReq's 128 bytes,
back to back (timing each connect), then watches for HOLD seconds how many the server closes,
closes the rest, and reports the server's RSS, open fds and threads before, at the peak and
3 s after.
"""

import argparse
import os
import select
import socket
import struct
import time


def proc(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return {"rss_kib": rss, "fds": fds, "threads": threads}


def half_icreq():
    # ICReq: type 0, flags 0, HLEN 128, PDO 0, PLEN 128; PFV 0, HPDA 0, DGST 0, MAXR2T 0.
    pdu = struct.pack("<BBBBI", 0x00, 0, 128, 0, 128) + bytes(120)
    return pdu[:64]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--half", type=int, default=200)
    ap.add_argument("--hold", type=float, default=20.0)
    a = ap.parse_args()

    before = proc(a.pid)
    socks = []
    slow = 0
    refused = 0
    worst = 0.0
    for i in range(a.idle + a.half):
        s = socket.socket()
        s.settimeout(5)
        t = time.monotonic()
        try:
            s.connect((a.host, a.port))
        except OSError:
            refused += 1
            s.close()
            continue
        dt = time.monotonic() - t
        worst = max(worst, dt)
        if dt > 0.5:
            slow += 1
        if i >= a.idle:
            s.sendall(half_icreq())
        s.setblocking(False)
        socks.append(s)
    opened = proc(a.pid)
    peak = dict(opened)
    closed_by_server = 0
    first_close = None
    start = time.monotonic()
    live = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in live:
        poller.register(fd, select.POLLIN)
    while live and time.monotonic() - start < a.hold:
        for fd, _ev in poller.poll(200):
            s = live.get(fd)
            if s is None:
                continue
            try:
                d = s.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                d = b""
            if not d:
                closed_by_server += 1
                if first_close is None:
                    first_close = time.monotonic() - start
                poller.unregister(fd)
                del live[fd]
        p = proc(a.pid)
        for k in peak:
            peak[k] = max(peak[k], p[k])
    for s in socks:
        s.close()
    time.sleep(3)
    after = proc(a.pid)
    print(f"connections: {a.idle} idle + {a.half} half-ICReq opened; refused {refused}; "
          f"connects over 0.5 s: {slow} (worst {worst * 1000:.0f} ms)")
    fc = "never" if first_close is None else f"first after {first_close:.1f} s"
    print(f"closed by the server within {a.hold:.0f} s: {closed_by_server} ({fc})")
    for k, unit in (("rss_kib", "KiB"), ("fds", ""), ("threads", "")):
        print(f"{k:8} before {before[k]:>8} {unit:3} peak {peak[k]:>8} {unit:3} "
              f"3 s after close {after[k]:>8} {unit}")


if __name__ == "__main__":
    main()
