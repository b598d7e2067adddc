#!/usr/bin/env python3
"""ebof against SPDK, side by side, in both roles (see scripts/bench-vs-spdk.sh for usage).

Target table: the same client (spdk_nvme_perf) against `ebof serve` and against SPDK's nvmf_tgt,
both pinned to the same core. Client table: `ebof perf` and spdk_nvme_perf, on the same core,
against nvmf_tgt. Rounds are interleaved (every workload on both sides in each round, the order
alternating), and the target not being measured is frozen (SIGSTOP), so that a busy-polling
nvmf_tgt does not steal the core from ebof or the other way round.

Rounds on a small VM swing up to 2x for both sides alike, so the method is many short rounds
(default 7 x 4 s after 1 s warm-up), the order alternating every round, and three ratios per row:
of the medians, of the best rounds, and the median [min-max] of the per-round paired ratios (each
round's two runs are back to back, so they share the machine's state). Every figure printed is a
median over the rounds with its min-max, plus the best round; CPU time per I/O is the measured
process's utime+stime over the measured window divided by its I/Os. Not a test: it prints.
"""

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPDK = os.environ.get("SPDK_DIR", "")
ROUNDS = int(os.environ.get("ROUNDS", "7"))
RUNTIME = int(os.environ.get("RUNTIME", "4"))
WARMUP = int(os.environ.get("WARMUP", "1"))
# The TLS section runs 6 pairs per workload; its own round count keeps it under ~15 min.
TLS_ROUNDS = int(os.environ.get("TLS_ROUNDS", str(min(ROUNDS, 5))))
TCORE = int(os.environ.get("TARGET_CORE", "0"))
CCORE = int(os.environ.get("CLIENT_CORE", "1"))
EBOF_PORT = int(os.environ.get("EBOF_PORT", "14420"))
SPDK_PORT = int(os.environ.get("SPDK_PORT", "14421"))
RAM_MB = int(os.environ.get("RAM_MB", "1024"))
ONLY = os.environ.get("ONLY", "")  # "target", "client", "idle", "scale", "tls", "tail" or all
# SPDK's target a second time with its io_uring socket implementation (`sock_set_default_impl
# -i uring`), where SPDK was built with it (--with-uring): 1 (default) tries it, 0 leaves it out.
SPDK_URING = os.environ.get("SPDK_URING", "1") != "0"
TAIL_ROUNDS = int(os.environ.get("TAIL_ROUNDS", "3"))
TAIL_RUNTIME = int(os.environ.get("TAIL_RUNTIME", "10"))
METRICS_PORT = int(os.environ.get("METRICS_PORT", "14490"))
# A target whose run loop was busy at least this share of the measured window was the limit.
SATURATED = 0.9
EBOF_NQN = "nqn.2026-11.io.ebof:default"
SPDK_NQN = "nqn.2016-06.io.spdk:cnode1"
URING_PORT = SPDK_PORT + 20

# (name, spdk_nvme_perf pattern, bs, qd, rwmixread or None)
TARGET_WORKLOADS = [
    ("4K randread QD1", "randread", 4096, 1, None),
    ("4K randread QD32", "randread", 4096, 32, None),
    ("4K randread QD128", "randread", 4096, 128, None),
    ("4K randwrite QD32", "randwrite", 4096, 32, None),
    ("4K randwrite QD128", "randwrite", 4096, 128, None),
    ("4K randrw 70/30 QD32", "randrw", 4096, 32, 70),
    ("128K read QD32", "read", 131072, 32, None),
    ("128K write QD32", "write", 131072, 32, None),
]
CLIENT_WORKLOADS = [
    ("4K randread QD1", "randread", 4096, 1, None),
    ("4K randread QD32", "randread", 4096, 32, None),
    ("4K randwrite QD32", "randwrite", 4096, 32, None),
    ("128K read QD32", "read", 131072, 32, None),
    ("128K write QD32", "write", 131072, 32, None),
]

# The tail section: (name, pattern, bs, qd, rwmixread)
TAIL_WORKLOADS = [
    ("4K randread QD1", "randread", 4096, 1, None),
    ("4K randread QD32", "randread", 4096, 32, None),
]

# The TLS section: (name, pattern, bs, qd)
TLS_WORKLOADS = [
    ("4K randread QD1", "randread", 4096, 1),
    ("4K randread QD32", "randread", 4096, 32),
    ("128K read QD32", "read", 131072, 32),
    ("128K write QD32", "write", 131072, 32),
]
TLS_HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:0000be0c-0000-4000-8000-00000000715e"

PROCS = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def die(msg):
    log(f"bench-vs-spdk: {msg}")
    sys.exit(1)


def spdk_bin(name):
    for sub in ("build/bin", "build/examples"):
        p = os.path.join(SPDK, sub, name)
        if os.access(p, os.X_OK):
            return p
    die(f"{name} not found under {SPDK}/build (build SPDK first)")


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port, proc, what):
    for _ in range(150):
        if proc.poll() is not None:
            die(f"{what} exited (code {proc.returncode})")
        if port_open(port):
            return
        time.sleep(0.2)
    die(f"{what} did not listen on {port}")


def cpu_ticks(pid):
    """utime + stime of a process, all threads, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_mm(values):
    if not values:
        return None
    return (statistics.median(values), min(values), max(values))


def fmt(t, digits=0):
    if t is None:
        return "-"
    m, lo, hi = t
    f = f"{{:,.{digits}f}}"
    return f"{f.format(m)} [{f.format(lo)}-{f.format(hi)}]"


def spdk_perf_args(port, nqn, pattern, bs, qd, mix, core_mask, extra=(), runtime=None):
    trid = f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{nqn}"
    args = [spdk_bin("spdk_nvme_perf"), "-q", str(qd), "-o", str(bs), "-w", pattern,
            "-t", str(runtime or RUNTIME), "-a", str(WARMUP), "-L", "-c", core_mask, "-r", trid]
    if mix is not None:
        args += ["-M", str(mix)]
    return args + list(extra)


def parse_spdk_perf(out):
    total = re.search(r"^Total\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+)\s+([\d.]+))?",
                      out, re.M)
    if not total:
        return None
    r = {"iops": float(total.group(1)), "mib_s": float(total.group(2)),
         "avg_us": float(total.group(3))}
    if total.group(5):
        r["max_us"] = float(total.group(5))
    pct = dict(re.findall(r"^\s*([\d.]+)%\s*:\s*([\d.]+)us", out, re.M))
    for key, name in (("50.00000", "p50_us"), ("99.00000", "p99_us"), ("99.90000", "p99_9_us"),
                      ("99.99000", "p99_99_us"), ("99.99900", "p99_999_us")):
        if key in pct:
            r[name] = float(pct[key])
    return r


def run_measured(args, target_pid, env=None, load=None, runtime=None):
    """Run a client; sample the target's and the client's CPU over the measured window (after
    warm-up), and the target's run-loop load (`load()`: busy and run seconds) over the same
    window. Returns (output, target CPU, client CPU, target busy share), CPU and busy as
    fractions of one core (busy None without `load`)."""
    runtime = runtime or RUNTIME
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    time.sleep(WARMUP + 0.5)  # + connect time
    try:
        k0 = cpu_ticks(p.pid)
    except OSError:
        k0 = None
    l0 = load() if load else None
    c0, t0 = cpu_ticks(target_pid), time.monotonic()
    time.sleep(max(runtime - 1.0, 0.5))
    c1, t1 = cpu_ticks(target_pid), time.monotonic()
    l1 = load() if load else None
    try:
        k1 = cpu_ticks(p.pid)
    except OSError:
        k1 = None
    out, _ = p.communicate(timeout=runtime + WARMUP + 60)
    ccpu = (k1 - k0) / (t1 - t0) if k0 is not None and k1 is not None else None
    busy = None
    if l0 and l1 and l1[1] > l0[1]:
        busy = (l1[0] - l0[0]) / (l1[1] - l0[1])
    return out, (c1 - c0) / (t1 - t0), ccpu, busy


def per_io(r, cpu, ccpu, busy=None):
    """Add the CPU figures to a result: fractions of a core, and microseconds per I/O; with the
    target's busy share, its busy time per I/O (what a polling target's CPU time cannot say)."""
    r["cpu"] = cpu
    r["us_per_io"] = cpu * 1e6 / r["iops"] if r["iops"] else None
    r["ccpu"] = ccpu
    r["client_us_per_io"] = ccpu * 1e6 / r["iops"] if r["iops"] and ccpu is not None else None
    r["busy"] = busy
    r["busy_us_per_io"] = busy * 1e6 / r["iops"] if r["iops"] and busy is not None else None
    return r


def spdk_rpc(sock, method, params=None):
    """One JSON-RPC call to an SPDK app over its Unix socket (no rpc.py process: the call runs
    inside a measured window)."""
    req = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        req["params"] = params
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(sock)
        s.sendall(json.dumps(req).encode())
        buf = b""
        dec = json.JSONDecoder()
        while True:
            chunk = s.recv(65536)
            if not chunk:
                raise OSError(f"{method}: connection closed")
            buf += chunk
            try:
                resp, _ = dec.raw_decode(buf.decode())
                break
            except ValueError:
                continue
    if "error" in resp:
        raise OSError(f"{method}: {resp['error']}")
    return resp["result"]


def spdk_load(sock):
    """SPDK's reactors' busy and total seconds (`framework_get_reactors`: busy and idle ticks)."""
    def sample():
        try:
            r = spdk_rpc(sock, "framework_get_reactors")
        except OSError as e:
            log(f"  framework_get_reactors: {e}")
            return None
        rate = r["tick_rate"]
        busy = sum(x["busy"] for x in r["reactors"])
        idle = sum(x["idle"] for x in r["reactors"])
        return busy / rate, (busy + idle) / rate
    return sample


def ebof_load(port):
    """ebof serve's TCP reactors' busy and run seconds, from its /metrics."""
    import urllib.request
    pat = re.compile(r'^ebof_reactor_(busy_)?seconds_total\{[^}]*loop="tcp"[^}]*\} ([\d.e+-]+)',
                     re.M)

    def sample():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            log(f"  ebof metrics: {e}")
            return None
        busy = run = 0.0
        for kind, v in pat.findall(text):
            if kind:
                busy += float(v)
            else:
                run += float(v)
        return (busy, run) if run else None
    return sample


def launch_nvmf_tgt(work, name, extra=()):
    """SPDK's nvmf_tgt on the target core (log `name`.log, RPC socket `name`.sock), once its
    RPC socket is there. Returns (process, RPC socket, rpc.py command)."""
    sock = os.path.join(work, f"{name}.sock")
    log_path = os.path.join(work, f"{name}.log")
    proc = subprocess.Popen([spdk_bin("nvmf_tgt"), "-m", hex(1 << TCORE), "-r", sock, *extra],
                            stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    PROCS.append(proc)
    for _ in range(100):
        if os.path.exists(sock):
            break
        if proc.poll() is not None:
            die(f"{name} exited; see {log_path}")
        time.sleep(0.1)
    return proc, sock, ["/usr/bin/python3", os.path.join(SPDK, "scripts/rpc.py"), "-s", sock]


def start_nvmf_tgt(work, name, shm_id, uring=False):
    """An SPDK nvmf_tgt on the target core with a malloc bdev of RAM_MB, listening on SPDK_PORT
    (URING_PORT with io_uring). Returns (process, RPC socket), or (None, why) when the uring
    variant cannot start (SPDK built without --with-uring)."""
    # Two nvmf_tgt on one core: each its own shared-memory id, and no per-core lock files.
    extra = ["-i", str(shm_id), "--disable-cpumask-locks"]
    if uring:
        extra.append("--wait-for-rpc")
    proc, sock, rpc = launch_nvmf_tgt(work, name, extra)
    port = URING_PORT if uring else SPDK_PORT
    if uring:
        try:
            spdk_rpc(sock, "sock_set_default_impl", {"impl_name": "uring"})
            spdk_rpc(sock, "framework_start_init")
        except OSError as e:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
            return None, str(e)
        for _ in range(100):  # framework_start_init returns before the subsystems are up
            try:
                spdk_rpc(sock, "framework_wait_init")
                break
            except OSError:
                time.sleep(0.1)
    for cmd in (["nvmf_create_transport", "-t", "TCP"],
                ["bdev_malloc_create", "-b", "Malloc0", str(RAM_MB), "512"],
                ["nvmf_create_subsystem", SPDK_NQN, "-a", "-s", "SPDK00000000000001"],
                ["nvmf_subsystem_add_ns", SPDK_NQN, "Malloc0"],
                ["nvmf_subsystem_add_listener", SPDK_NQN, "-t", "tcp", "-a", "127.0.0.1",
                 "-s", str(port)]):
        subprocess.run(rpc + cmd, check=True, stdout=subprocess.DEVNULL, timeout=60)
    wait_port(port, proc, name)
    return proc, sock


class Targets:
    """`ebof serve` and SPDK's nvmf_tgt (and nvmf_tgt on io_uring sockets, where it builds) on
    the same core; one runs at a time, the others are frozen."""

    def __init__(self, ebof_bin, work, uring=SPDK_URING):
        self.work = work
        ebof = subprocess.Popen(
            ["taskset", "-c", str(TCORE), ebof_bin, "serve", "--listen",
             f"127.0.0.1:{EBOF_PORT}", "--ram", f"{RAM_MB}M", "--cores", str(TCORE),
             "--metrics-listen", f"127.0.0.1:{METRICS_PORT}"],
            stdout=open(os.path.join(work, "ebof.log"), "w"), stderr=subprocess.STDOUT)
        PROCS.append(ebof)
        wait_port(EBOF_PORT, ebof, "ebof serve")
        self.procs = {"ebof": ebof}
        self.loads = {"ebof": ebof_load(METRICS_PORT)}
        self.ports = {"ebof": (EBOF_PORT, EBOF_NQN)}
        spdk, sock = start_nvmf_tgt(work, "nvmf_tgt", 1)
        self.procs["spdk"] = spdk
        self.loads["spdk"] = spdk_load(sock)
        self.ports["spdk"] = (SPDK_PORT, SPDK_NQN)
        if uring:
            # Its own shared-memory id; frozen while the other runs, like every idle side.
            os.kill(spdk.pid, signal.SIGSTOP)
            proc, sock = start_nvmf_tgt(work, "nvmf_tgt-uring", 2, uring=True)
            os.kill(spdk.pid, signal.SIGCONT)
            if proc is None:
                log(f"  no io_uring row: {sock}")
            else:
                self.procs["spdk-uring"] = proc
                self.loads["spdk-uring"] = spdk_load(sock)
                self.ports["spdk-uring"] = (URING_PORT, SPDK_NQN)
        self.sides = list(self.procs)
        self.active = None

    def pid(self, which):
        return self.procs[which].pid

    def only(self, which):
        """Run `which`, freeze the others (a frozen nvmf_tgt does not spin)."""
        if self.active == which:
            return
        for w, p in self.procs.items():
            if w != which:
                os.kill(p.pid, signal.SIGSTOP)
        os.kill(self.pid(which), signal.SIGCONT)
        self.active = which
        time.sleep(0.3)

    def both(self):
        for p in self.procs.values():
            os.kill(p.pid, signal.SIGCONT)
        self.active = None

    def endpoint(self, which):
        return self.ports[which]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def precondition(only, pid, port):
    """Write the whole ebof RAM namespace once (SPDK's malloc bdev is allocated up front), so
    that no measured round pays for first-touch page faults: sequential writes until ebof's
    resident size covers the namespace (first touches run at a few hundred MB/s on a VM, so a
    fixed 2 s covered about half of 1 GiB)."""
    only("ebof")
    args = spdk_perf_args(port, EBOF_NQN, "write", 131072, 32, None, hex(1 << CCORE))
    args[args.index("-t") + 1] = "3"
    args[args.index("-a") + 1] = "0"
    for _ in range(20):
        subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        if rss_bytes(pid) >= RAM_MB << 20:
            return
    log(f"  precondition: ebof resident {rss_bytes(pid) >> 20} MiB < namespace {RAM_MB} MiB")


def round_order(sides, rnd):
    """The sides' order in round `rnd`: rotated each round, reversed every other."""
    k = rnd % len(sides)
    order = sides[k:] + sides[:k]
    return order if rnd % 2 == 0 else order[::-1]


def spdk_client_rounds(t, workloads, rounds, runtime, tag):
    """spdk_nvme_perf against every target of `t`, `rounds` interleaved rounds of `runtime` s:
    {(workload, target): [results]}, each with the target's CPU and busy share."""
    res = {}
    for rnd in range(rounds):
        for name, pattern, bs, qd, mix in workloads:
            for which in round_order(t.sides, rnd):
                t.only(which)
                port, nqn = t.endpoint(which)
                out, cpu, ccpu, busy = run_measured(
                    spdk_perf_args(port, nqn, pattern, bs, qd, mix, hex(1 << CCORE),
                                   runtime=runtime), t.pid(which), load=t.loads[which],
                    runtime=runtime)
                r = parse_spdk_perf(out)
                if r is None:
                    log(f"  {which} {name}: no result\n{out[-2000:]}")
                    continue
                r["round"] = rnd
                res.setdefault((name, which), []).append(per_io(r, cpu, ccpu, busy))
                log(f"  {tag} round {rnd + 1} {which:10} {name:22} {r['iops']:>10,.0f} IOPS "
                    f"p99 {r.get('p99_us', 0):8.1f}  p99.99 {r.get('p99_99_us', 0):8.1f} us  "
                    f"target busy {(busy or 0) * 100:5.1f} %")
    return res


def target_table(t):
    return spdk_client_rounds(t, TARGET_WORKLOADS, ROUNDS, RUNTIME, "target")


def ratios(a, b, key="iops"):
    """ebof/other ratios of `key` of two result lists: of the medians, of the best rounds, and
    the median [min-max] of the per-round paired ratios. Empty strings when one side is
    missing. (For a figure where less is better, "best" is still the max: read it as such.)"""
    ia = [r[key] for r in a if r.get(key) is not None]
    ib = [r[key] for r in b if r.get(key) is not None]
    if not ia or not ib or not statistics.median(ib) or not max(ib):
        return "", "", ""
    med = f"**{statistics.median(ia) / statistics.median(ib):.2f}x**"
    best = f"{max(ia) / max(ib):.2f}x"
    by_round = {r["round"]: r[key] for r in b if "round" in r and r.get(key)}
    paired = [r[key] / by_round[r["round"]] for r in a
              if by_round.get(r.get("round")) and r.get(key)]
    pr = median_mm(paired)
    return med, best, (f"{pr[0]:.2f} [{pr[1]:.2f}-{pr[2]:.2f}]" if pr else "")


def limit(rs):
    """Which side limited a row: the target when its run loop was busy ≥ SATURATED of the
    window (median over rounds), else the client (or the wire)."""
    b = median_mm([r["busy"] for r in rs if r.get("busy") is not None])
    if not b:
        return "?"
    return "target" if b[0] >= SATURATED else "client"


def pct(t):
    return fmt((t[0] * 100, t[1] * 100, t[2] * 100) if t else None)


LAT_KEYS = ("avg_us", "p50_us", "p99_us", "p99_9_us", "p99_99_us")
LAT_HEAD = "avg / p50 / p99 / p99.9 / p99.99 us"
RATIO_HEADS = ["ebof/other IOPS medians", "best/best", "paired rounds"]


def table(res, workloads, sides, labels, cols):
    """A markdown table: per workload, a row per side (ebof first), each figure a median
    [min-max] over the rounds. `cols`: (heading, cell(g, rs, ebof_rs, which)) after the common
    columns, where `g(key)` is the median [min-max] of a figure; each non-ebof row ends with
    the ebof/other IOPS ratios (medians, best rounds, paired rounds)."""
    heads = ["workload", "side", "IOPS", "best IOPS", "MiB/s", LAT_HEAD] + [h for h, _ in cols]
    print("| " + " | ".join(heads + RATIO_HEADS) + " |")
    print("|" + "---|" * (len(heads) + len(RATIO_HEADS)))
    for name, *_ in workloads:
        mine = res.get((name, "ebof"), [])
        for which in sides:
            rs = res.get((name, which), [])
            if not rs:
                continue
            g = lambda k: median_mm([r[k] for r in rs if r.get(k) is not None])  # noqa: E731,B023
            lat = " / ".join(f"{g(k)[0]:.1f}" if g(k) else "-" for k in LAT_KEYS)
            cells = [name, labels[which], fmt(g("iops")), f"{max(r['iops'] for r in rs):,.0f}",
                     fmt(g("mib_s")), lat] + [c(g, rs, mine, which) for _, c in cols]
            cells += list(ratios(mine, rs)) if which != "ebof" else ["", "", ""]
            print("| " + " | ".join(cells) + " |")


def busy_ratio(g, rs, mine, which):
    return ratios(mine, rs, "busy_us_per_io")[0] if which != "ebof" else ""


TARGET_LABELS = {"ebof": "ebof serve", "spdk": "SPDK nvmf_tgt",
                 "spdk-uring": "SPDK nvmf_tgt, io_uring sockets"}
BUSY_NOTE = ("Target busy: the share of the measured window its run loop spent on turns that "
             "did work (ebof: `ebof_reactor_busy_seconds_total`; SPDK: `framework_get_reactors` "
             "busy ticks); busy us per I/O is what an I/O costs the target whether or not it was "
             f"the limit. Limit: the target when it was busy >= {SATURATED:.0%} of the window, "
             "else the client (or the wire). Process CPU (utime + stime) reads ~100 % on a "
             "polling side whatever it does.")


def print_target_table(res, sides):
    print("\n### Same client (spdk_nvme_perf) -> target, "
          f"target on core {TCORE}, client on core {CCORE}; median [min-max] of {ROUNDS} rounds "
          f"of {RUNTIME} s\n")
    print(BUSY_NOTE + "\n")
    table(res, TARGET_WORKLOADS, sides, TARGET_LABELS, [
        ("target CPU %", lambda g, *_: pct(g("cpu"))),
        ("client CPU %", lambda g, *_: pct(g("ccpu"))),
        ("target busy %", lambda g, *_: pct(g("busy"))),
        ("target busy us per I/O", lambda g, *_: fmt(g("busy_us_per_io"), 2)),
        ("busy per I/O ebof/other", busy_ratio),
        ("limit", lambda g, rs, *_: limit(rs)),
    ])


def ebof_perf_args(ebof_bin, pattern, bs, qd, mix):
    args = ["taskset", "-c", str(CCORE), ebof_bin, "perf", "-a", "127.0.0.1", "-s",
            str(SPDK_PORT), "-n", SPDK_NQN, "--rw", pattern, "--bs", str(bs), "--qd", str(qd),
            "--cores", str(CCORE), "--runtime", f"{RUNTIME}s", "--ramp", f"{WARMUP}s", "--json"]
    if mix is not None:
        args += ["--mix", str(mix)]
    return args


def client_table(t, ebof_bin):
    t.only("spdk")
    res = {}
    for rnd in range(ROUNDS):
        for wl in CLIENT_WORKLOADS:
            name, pattern, bs, qd, mix = wl
            order = ("ebof", "spdk") if (rnd % 2 == 0) else ("spdk", "ebof")
            for client in order:
                if client == "spdk":
                    args = spdk_perf_args(SPDK_PORT, SPDK_NQN, pattern, bs, qd, mix,
                                          hex(1 << CCORE))
                else:
                    args = ebof_perf_args(ebof_bin, pattern, bs, qd, mix)
                out, cpu, ccpu, busy = run_measured(args, t.pid("spdk"), load=t.loads["spdk"])
                r = parse_spdk_perf(out) if client == "spdk" else parse_ebof_perf(out)
                if r is None:
                    log(f"  {client} {name}: no result\n{out[-2000:]}")
                    continue
                r["round"] = rnd
                res.setdefault((name, client), []).append(per_io(r, cpu, ccpu, busy))
                log(f"  round {rnd + 1} {client:4} {name:22} {r['iops']:>10,.0f} IOPS "
                    f"{r['mib_s']:>8,.0f} MiB/s  avg {r['avg_us']:7.1f} us  client CPU "
                    f"{(ccpu or 0) * 100:5.1f} %")
    return res


def print_client_table(res):
    print("\n### Same target (SPDK nvmf_tgt, core "
          f"{TCORE}) <- client on core {CCORE}; median [min-max] of {ROUNDS} rounds of "
          f"{RUNTIME} s\n")
    print(BUSY_NOTE + "\n")
    table(res, CLIENT_WORKLOADS, ["ebof", "spdk"], {"ebof": "ebof perf", "spdk": "spdk_nvme_perf"}, [
        ("client CPU %", lambda g, *_: pct(g("ccpu"))),
        ("client CPU us per I/O", lambda g, *_: fmt(g("client_us_per_io"), 2)),
        ("target busy %", lambda g, *_: pct(g("busy"))),
        ("limit", lambda g, rs, *_: limit(rs)),
    ])


def tail_section(t):
    """Tail latency, the ADQ paper's headline: 4K random reads at QD1 and QD32 from
    spdk_nvme_perf against every target as it ships (ebof's adaptive polling, SPDK's busy
    polling), TAIL_ROUNDS interleaved rounds of TAIL_RUNTIME s each."""
    res = spdk_client_rounds(t, TAIL_WORKLOADS, TAIL_ROUNDS, TAIL_RUNTIME, "tail")
    print(f"\n### Tail latency: spdk_nvme_perf -> target, 4K random reads, target on core {TCORE}, "
          f"client on core {CCORE}; median [min-max] of {TAIL_ROUNDS} rounds of {TAIL_RUNTIME} s; "
          "each target as it ships (ebof: adaptive polling, `--poll-us 100`; SPDK: busy polling)"
          "\n")
    print("| workload | target | IOPS | p50 us | p99 us | p99.9 us | p99.99 us | p99.999 us "
          "| max us | p99.9 ebof/other (medians, paired) | p99.99 ebof/other (medians, paired) |")
    print("|" + "---|" * 11)
    for name, *_ in TAIL_WORKLOADS:
        mine = res.get((name, "ebof"), [])
        for which in t.sides:
            rs = res.get((name, which), [])
            if not rs:
                continue
            g = lambda k: median_mm([r[k] for r in rs if r.get(k) is not None])  # noqa: E731,B023
            cells = [name, TARGET_LABELS[which], fmt(g("iops"))]
            cells += [fmt(g(k), 1) for k in ("p50_us", "p99_us", "p99_9_us", "p99_99_us",
                                             "p99_999_us", "max_us")]
            for key in ("p99_9_us", "p99_99_us"):
                if which == "ebof":
                    cells.append("")
                    continue
                med, _, paired = ratios(mine, rs, key)
                cells.append(f"{med}, {paired}" if med else "")
            print("| " + " | ".join(cells) + " |")


def idle_cpu(t):
    t.only("ebof")
    pid = t.pid("ebof")
    c0, t0 = cpu_ticks(pid), time.monotonic()
    time.sleep(5)
    c1, t1 = cpu_ticks(pid), time.monotonic()
    print(f"\nIdle `ebof serve` (default configuration, no traffic) over 5 s: "
          f"{(c1 - c0) / (t1 - t0) * 100:.2f} % of a core")


def scale(ebof_bin, work):
    """The 1 -> 2 core step: ebof serve on 1 then 2 cores, the client on both cores too."""
    print("\n### 1 -> 2 cores: ebof serve --cores 0 vs 0,1, the client on cores 0,1 as well "
          "(two queues, 4K randread QD32 each); median [min-max] IOPS\n")
    print("| target cores | spdk_nvme_perf -c 0x3 (polling client) "
          "| ebof perf --cores 0,1 --no-busy-poll (event-driven client) |")
    print("|---|---|---|")
    port = EBOF_PORT + 2
    for cores in ("0", "0,1"):
        srv = subprocess.Popen([ebof_bin, "serve", "--listen", f"127.0.0.1:{port}",
                                "--ram", "256M", "--cores", cores],
                               stdout=open(os.path.join(work, f"scale{cores}.log"), "w"),
                               stderr=subprocess.STDOUT)
        PROCS.append(srv)
        wait_port(port, srv, "ebof serve")
        spdk_vals, ebof_vals = [], []
        for _ in range(ROUNDS):
            out, *_ = run_measured(spdk_perf_args(port, EBOF_NQN, "randread", 4096, 32, None,
                                                    "0x3"), srv.pid)
            r = parse_spdk_perf(out)
            if r:
                spdk_vals.append(r["iops"])
            out, *_ = run_measured(
                [ebof_bin, "perf", "-a", "127.0.0.1", "-s", str(port), "-n", EBOF_NQN,
                 "--rw", "randread", "--qd", "32", "--cores", "0,1", "--no-busy-poll",
                 "--runtime", f"{RUNTIME}s", "--ramp", f"{WARMUP}s", "--json"], srv.pid)
            try:
                ebof_vals.append(json.loads(out[out.index("{"):])["iops"])
            except (ValueError, KeyError):
                log(f"  ebof perf (scale): no result\n{out[-1000:]}")
        srv.terminate()
        srv.wait(timeout=30)
        print(f"| {cores} | {fmt(median_mm(spdk_vals))} | {fmt(median_mm(ebof_vals))} |")


def tls_key():
    """A fresh configured PSK in the NVMe interchange format (SHA-256, 32 bytes + CRC-32)."""
    import base64
    import zlib
    key = os.urandom(32)
    crc = zlib.crc32(key).to_bytes(4, "little")
    return "NVMeTLSkey-1:01:" + base64.b64encode(key + crc).decode() + ":"


class TlsTargets:
    """ebof serve and nvmf_tgt, each with a plain and a TLS listener and one PSK host."""

    def __init__(self, ebof_bin, work):
        self.key = tls_key()
        self.psk_file = os.path.join(work, "psk.key")
        with open(self.psk_file, "w") as f:
            f.write(self.key)  # SPDK wants the interchange string alone, no newline
        os.chmod(self.psk_file, 0o600)
        self.ports = {("ebof", False): EBOF_PORT + 4, ("ebof", True): EBOF_PORT + 5,
                      ("spdk", False): SPDK_PORT + 10, ("spdk", True): SPDK_PORT + 11}
        cfg = os.path.join(work, "ebof-tls.toml")
        with open(cfg, "w") as f:
            f.write(f"""[target]
cores = [{TCORE}]
[[listeners]]
address = "127.0.0.1"
port = {self.ports[("ebof", False)]}
[[listeners]]
address = "127.0.0.1"
port = {self.ports[("ebof", True)]}
tls = "required"
[[hosts]]
nqn = "{TLS_HOSTNQN}"
tls_key_file = "{self.psk_file}"
tls_psk_derivation = "rfc8446"   # SPDK's initiator derives version-0 PSKs the RFC 8446 way
[[subsystems]]
nqn = "{EBOF_NQN}"
allow_any_host = true
[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "{RAM_MB}M"
[management]
enabled = false
[metrics]
listen = "127.0.0.1:{METRICS_PORT + 1}"
""")
        self.ebof = subprocess.Popen(["taskset", "-c", str(TCORE), ebof_bin, "serve", "--config", cfg],
                                     stdout=open(os.path.join(work, "ebof-tls.log"), "w"),
                                     stderr=subprocess.STDOUT)
        PROCS.append(self.ebof)
        wait_port(self.ports[("ebof", False)], self.ebof, "ebof serve (TLS)")
        self.spdk, sock, rpc = launch_nvmf_tgt(work, "nvmf_tgt-tls")
        for cmd in (["nvmf_create_transport", "-t", "TCP"],
                    ["bdev_malloc_create", "-b", "Malloc0", str(RAM_MB), "512"],
                    ["nvmf_create_subsystem", SPDK_NQN, "-s", "SPDK00000000000001"],
                    ["nvmf_subsystem_add_ns", SPDK_NQN, "Malloc0"],
                    ["nvmf_subsystem_add_listener", SPDK_NQN, "-t", "tcp", "-a", "127.0.0.1",
                     "-s", str(self.ports[("spdk", False)])],
                    ["nvmf_subsystem_add_listener", SPDK_NQN, "-t", "tcp", "-a", "127.0.0.1",
                     "-s", str(self.ports[("spdk", True)]), "--secure-channel"],
                    ["keyring_file_add_key", "key0", self.psk_file],
                    ["nvmf_subsystem_add_host", SPDK_NQN, TLS_HOSTNQN, "--psk", "key0"]):
            subprocess.run(rpc + cmd, check=True, stdout=subprocess.DEVNULL, timeout=60)
        wait_port(self.ports[("spdk", True)], self.spdk, "nvmf_tgt (TLS)")
        self.loads = {"ebof": ebof_load(METRICS_PORT + 1), "spdk": spdk_load(sock)}

    def only(self, which):
        other = self.spdk if which == "ebof" else self.ebof
        mine = self.ebof if which == "ebof" else self.spdk
        os.kill(other.pid, signal.SIGSTOP)
        os.kill(mine.pid, signal.SIGCONT)
        time.sleep(0.3)


def tls_client_args(client, ebof_bin, t, target, tls, pattern, bs, qd):
    port = t.ports[(target, tls)]
    nqn = EBOF_NQN if target == "ebof" else SPDK_NQN
    if client == "spdk":
        trid = (f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{nqn} "
                f"hostnqn:{TLS_HOSTNQN}")
        args = [spdk_bin("spdk_nvme_perf"), "-q", str(qd), "-o", str(bs), "-w", pattern,
                "-t", str(RUNTIME), "-a", str(WARMUP), "-L", "-c", hex(1 << CCORE), "-r", trid]
        if tls:
            args += ["-S", "ssl", "--psk-path", t.psk_file]
        return args
    args = ["taskset", "-c", str(CCORE), ebof_bin, "perf", "-a", "127.0.0.1", "-s", str(port),
            "-n", nqn, "--hostnqn", TLS_HOSTNQN, "--rw", pattern, "--bs", str(bs), "--qd",
            str(qd), "--cores", str(CCORE), "--runtime", f"{RUNTIME}s", "--ramp",
            f"{WARMUP}s", "--json"]
    if tls:
        args += ["--tls", "--tls-key", t.key, "--tls-psk-derivation", "rfc8446"]
    return args


def parse_ebof_perf(out):
    try:
        j = json.loads(out[out.index("{"):])
        lat = j["latency_us"]
        return {"iops": j["iops"], "mib_s": j["mib_s"], "avg_us": lat["avg"],
                "p50_us": lat["p50"], "p99_us": lat["p99"], "p99_9_us": lat.get("p99_9"),
                "p99_99_us": lat["p99_99"]}
    except (ValueError, KeyError):
        return None


def cipher_rate():
    """`openssl speed` AES-128-GCM on 16 KiB blocks on the target core: bytes per second."""
    try:
        out = subprocess.run(["taskset", "-c", str(TCORE), "openssl", "speed", "-seconds", "3",
                              "-bytes", "16384", "-evp", "aes-128-gcm"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^(?:AES-128-GCM|aes-128-gcm)\s+([\d.]+)k", out, re.M)
    return float(m.group(1)) * 1000 if m else None


# (target, client) pairs of the TLS section, each run plain and over TLS.
TLS_PAIRS = [("ebof", "ebof"), ("ebof", "spdk"), ("spdk", "spdk")]


def tls_section(ebof_bin, work):
    """Plain vs TLS: ebof perf -> ebof serve, spdk_nvme_perf -> both targets; the cipher's
    single-core rate measured in the same run; connect time with DH-HMAC-CHAP."""
    t = TlsTargets(ebof_bin, work)
    precondition(t.only, t.ebof.pid, t.ports[("ebof", False)])
    res = {}
    rates = []
    for rnd in range(TLS_ROUNDS):
        for name, pattern, bs, qd in TLS_WORKLOADS:
            pairs = TLS_PAIRS if rnd % 2 == 0 else list(reversed(TLS_PAIRS))
            for target, client in pairs:
                t.only(target)
                pid = (t.ebof if target == "ebof" else t.spdk).pid
                for tls in ((False, True) if rnd % 2 == 0 else (True, False)):
                    out, cpu, ccpu, busy = run_measured(
                        tls_client_args(client, ebof_bin, t, target, tls, pattern, bs, qd), pid,
                        load=t.loads[target])
                    r = parse_spdk_perf(out) if client == "spdk" else parse_ebof_perf(out)
                    if r is None:
                        log(f"  {client}->{target} tls={tls} {name}: no result\n{out[-1500:]}")
                        continue
                    r["round"] = rnd
                    res.setdefault((name, target, client, tls), []).append(
                        per_io(r, cpu, ccpu, busy))
                    log(f"  round {rnd + 1} {client:4}->{target:4} {'TLS' if tls else 'tcp'} "
                        f"{name:18} {r['iops']:>9,.0f} IOPS {r['mib_s']:>7,.0f} MiB/s "
                        f"target CPU {cpu * 100:5.1f} %")
        # The cipher's rate once per round, with both targets frozen.
        for p in (t.ebof, t.spdk):
            os.kill(p.pid, signal.SIGSTOP)
        rate = cipher_rate()
        if rate:
            rates.append(rate)
            log(f"  round {rnd + 1} openssl speed aes-128-gcm 16 KiB: {rate / 1e9:.2f} GB/s")
        os.kill(t.ebof.pid, signal.SIGCONT)
        os.kill(t.spdk.pid, signal.SIGCONT)
    print("\n### NVMe/TCP with and without TLS 1.3 (PSK, TLS_AES_128_GCM_SHA256), target on core "
          f"{TCORE}, client on core {CCORE}; median [min-max] of {TLS_ROUNDS} rounds of "
          f"{RUNTIME} s\n")
    print("| workload | target | client | transport | IOPS | best IOPS | MiB/s | avg / p99 us "
          "| target CPU % | target busy % | target busy us per I/O | client CPU us per I/O "
          "| limit | TLS/plain IOPS | TLS: ebof/SPDK target (medians, best, paired) |")
    print("|" + "---|" * 15)
    labels = {"ebof": ("ebof serve", "ebof perf"), "spdk": ("SPDK nvmf_tgt", "spdk_nvme_perf")}
    for name, *_ in TLS_WORKLOADS:
        for target, client in TLS_PAIRS:
            plain = None
            for tls in (False, True):
                rs = res.get((name, target, client, tls), [])
                if not rs:
                    continue
                g = lambda k: median_mm([r[k] for r in rs if r.get(k) is not None])  # noqa: E731
                iops = g("iops")
                if not tls:
                    plain = iops
                ratio = f"**{iops[0] / plain[0]:.2f}**" if tls and plain and plain[0] else ""
                vs = ""
                if tls and target == "spdk" and client == "spdk":
                    m, b, pr = ratios(res.get((name, "ebof", "spdk", True), []), rs)
                    vs = f"{m}, {b}, {pr}" if m else ""
                cpu = g("cpu")
                lat = " / ".join(f"{g(k)[0]:.1f}" if g(k) else "-" for k in ("avg_us", "p99_us"))
                print("| " + " | ".join([
                    name, labels[target][0], labels[client][1], "TLS" if tls else "TCP",
                    fmt(iops), f"{max(r['iops'] for r in rs):,.0f}", fmt(g("mib_s")), lat,
                    fmt((cpu[0] * 100, cpu[1] * 100, cpu[2] * 100) if cpu else None),
                    pct(g("busy")), fmt(g("busy_us_per_io"), 2), fmt(g("client_us_per_io"), 2),
                    limit(rs), ratio, vs]) + " |")
    if rates:
        rate = median_mm(rates)
        print(f"\nAES-128-GCM on one core (`openssl speed -evp aes-128-gcm -bytes 16384` on core "
              f"{TCORE}, once per round): {rate[0] / 1e9:.2f} GB/s [{rate[1] / 1e9:.2f}-"
              f"{rate[2] / 1e9:.2f}]")
        for name, *_ in TLS_WORKLOADS:
            if not name.startswith("128K"):
                continue
            rs = res.get((name, "ebof", "ebof", True), [])
            if rs:
                mb = median_mm([r["mib_s"] * 1048576 for r in rs])
                print(f"- ebof perf -> ebof serve over TLS, {name}: {mb[0] / 1e9:.2f} GB/s "
                      f"[{mb[1] / 1e9:.2f}-{mb[2] / 1e9:.2f}] = {mb[0] / rate[0] * 100:.0f} % of "
                      "the cipher's single-core rate")
    # Connection set-up: `ebof identify` (admin queue only) with and without DH-HMAC-CHAP
    # against ebof serve, wall time per connect.
    os.kill(t.spdk.pid, signal.SIGSTOP)
    os.kill(t.ebof.pid, signal.SIGCONT)
    t.ebof.terminate()
    t.ebof.wait(timeout=30)
    auth_connect_times(ebof_bin, work)
    os.kill(t.spdk.pid, signal.SIGCONT)


def auth_connect_times(ebof_bin, work):
    port = EBOF_PORT + 6
    host_key = "DHHC-1:01:VZi5tbir3nYufwfgCrjX0O2mmPHFkObvzamIRZnYUahWiFGg:"
    ctrl_key = "DHHC-1:02:elMhBLOsS9lwM3coDHJdWd13OK+KUnC7FcTJuoLCxjK/HGD9d7D/WpmmINI3kXxbIeTtsA==:"
    cfg = os.path.join(work, "ebof-auth.toml")
    with open(cfg, "w") as f:
        f.write(f"""[target]
cores = [{TCORE}]
[[listeners]]
address = "127.0.0.1"
port = {port}
[[hosts]]
nqn = "{TLS_HOSTNQN}"
dhchap_key = "{host_key}"
dhchap_ctrl_key = "{ctrl_key}"
[[subsystems]]
nqn = "{EBOF_NQN}"
allow_any_host = true
[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "64M"
[management]
enabled = false
""")
    srv = subprocess.Popen(["taskset", "-c", str(TCORE), ebof_bin, "serve", "--config", cfg],
                           stdout=open(os.path.join(work, "ebof-auth.log"), "w"),
                           stderr=subprocess.STDOUT)
    PROCS.append(srv)
    wait_port(port, srv, "ebof serve (auth)")
    other = "nqn.2014-08.org.nvmexpress:uuid:0000be0c-0000-4000-8000-0000000000ff"
    cases = [("no authentication", other, []),
             ("DH-HMAC-CHAP one-way (ffdhe2048, SHA-256)", TLS_HOSTNQN,
              ["--dhchap-secret", host_key]),
             ("DH-HMAC-CHAP bidirectional", TLS_HOSTNQN,
              ["--dhchap-secret", host_key, "--dhchap-ctrl-secret", ctrl_key])]
    print("\n### Connection set-up: `ebof identify` (TCP connect, ICReq, Connect, authentication, "
          f"Identify, disconnect) against ebof serve, median [min-max] ms of {max(ROUNDS, 5) * 4}\n")
    print("| authentication | ms per connection |")
    print("|---|---|")
    for label, host, extra in cases:
        times = []
        for _ in range(max(ROUNDS, 5) * 4):
            t0 = time.monotonic()
            r = subprocess.run(["taskset", "-c", str(CCORE), ebof_bin, "identify", "-a",
                                "127.0.0.1", "-s", str(port), "-n", EBOF_NQN, "--hostnqn",
                                host] + extra, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=60)
            if r.returncode != 0:
                log(f"  identify ({label}) failed: {r.stderr[-500:]}")
                break
            times.append((time.monotonic() - t0) * 1000)
        print(f"| {label} | {fmt(median_mm(times), 1)} |")
    srv.terminate()
    srv.wait(timeout=30)


def main():
    if not SPDK or not os.path.isdir(SPDK):
        die("set SPDK_DIR to a built SPDK tree (see docs/guide/bench.md)")
    if os.geteuid() != 0:
        die("needs root (hugepages for SPDK, SIGSTOP of the idle target)")
    if shutil.which("taskset") is None:
        die("taskset (util-linux) is needed")
    for port in (EBOF_PORT, SPDK_PORT, URING_PORT, METRICS_PORT, METRICS_PORT + 1,
                 EBOF_PORT + 2, EBOF_PORT + 4, EBOF_PORT + 5,
                 EBOF_PORT + 6, SPDK_PORT + 10, SPDK_PORT + 11):
        if port_open(port):
            die(f"port {port} is in use")
    with open("/proc/mounts") as f:
        if not any(ln.split()[2:3] == ["hugetlbfs"] for ln in f):
            # DPDK needs a hugetlbfs mount (containers often have none)
            os.makedirs("/dev/hugepages", exist_ok=True)
            subprocess.run(["mount", "-t", "hugetlbfs", "nodev", "/dev/hugepages"], check=True)
    with open("/proc/sys/vm/nr_hugepages") as f:
        # Two nvmf_tgt (posix and io_uring sockets) with a RAM_MB malloc bdev each.
        want = 2048 if SPDK_URING and ONLY != "tls" else 1024
        if int(f.read()) < want:
            with open("/proc/sys/vm/nr_hugepages", "w") as w:
                w.write(str(want))
    log("== building ebof (release)")
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "ebof", "--quiet"],
                   cwd=ROOT, check=True)
    ebof_bin = os.path.join(ROOT, "target/release/ebof")
    work = tempfile.mkdtemp(prefix="bench-vs-spdk.")
    with open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    print(f"## ebof vs SPDK — {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({model}), "
          f"kernel {os.uname().release}, loopback; {ROUNDS} interleaved rounds of {RUNTIME} s "
          f"runs after {WARMUP} s warm-up")
    try:
        if ONLY != "tls":
            t = Targets(ebof_bin, work)
            precondition(t.only, t.pid("ebof"), EBOF_PORT)
            if ONLY in ("", "target"):
                log("== target table")
                print_target_table(target_table(t), t.sides)
            if ONLY in ("", "client"):
                log("== client table")
                print_client_table(client_table(t, ebof_bin))
            if ONLY in ("", "tail"):
                log("== tail latency")
                tail_section(t)
            if ONLY in ("", "idle"):
                idle_cpu(t)
            t.both()
            if ONLY in ("", "scale"):
                spdks = [w for w in t.sides if w != "ebof"]
                for w in spdks:
                    os.kill(t.pid(w), signal.SIGSTOP)
                scale(ebof_bin, work)
                for w in spdks:
                    os.kill(t.pid(w), signal.SIGCONT)
        if ONLY in ("", "tls"):
            # The TLS section starts targets of its own (huge pages for one nvmf_tgt more).
            cleanup()
            log("== TLS and authentication")
            tls_section(ebof_bin, work)
    finally:
        cleanup()
        log(f"logs in {work}")


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.send_signal(signal.SIGINT)
                p.wait(timeout=20)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                p.kill()
                p.wait()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        cleanup()
        sys.exit(130)
