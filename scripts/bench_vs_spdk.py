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
ONLY = os.environ.get("ONLY", "")  # "target", "client", "idle", "scale", "tls" or empty for all
EBOF_NQN = "nqn.2026-11.io.ebof:default"
SPDK_NQN = "nqn.2016-06.io.spdk:cnode1"

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


def spdk_perf_args(port, nqn, pattern, bs, qd, mix, core_mask, extra=()):
    trid = f"trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{nqn}"
    args = [spdk_bin("spdk_nvme_perf"), "-q", str(qd), "-o", str(bs), "-w", pattern,
            "-t", str(RUNTIME), "-a", str(WARMUP), "-L", "-c", core_mask, "-r", trid]
    if mix is not None:
        args += ["-M", str(mix)]
    return args + list(extra)


def parse_spdk_perf(out):
    total = re.search(r"^Total\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    if not total:
        return None
    r = {"iops": float(total.group(1)), "mib_s": float(total.group(2)),
         "avg_us": float(total.group(3))}
    pct = dict(re.findall(r"^\s*([\d.]+)%\s*:\s*([\d.]+)us", out, re.M))
    for key, name in (("50.00000", "p50_us"), ("99.00000", "p99_us"), ("99.99000", "p99_99_us")):
        if key in pct:
            r[name] = float(pct[key])
    return r


def run_measured(args, target_pid, env=None):
    """Run a client; sample the target's and the client's CPU over the measured window (after
    warm-up). Returns (output, target CPU, client CPU), CPU as a fraction of one core."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    time.sleep(WARMUP + 0.5)  # + connect time
    try:
        k0 = cpu_ticks(p.pid)
    except OSError:
        k0 = None
    c0, t0 = cpu_ticks(target_pid), time.monotonic()
    time.sleep(max(RUNTIME - 1.0, 0.5))
    c1, t1 = cpu_ticks(target_pid), time.monotonic()
    try:
        k1 = cpu_ticks(p.pid)
    except OSError:
        k1 = None
    out, _ = p.communicate(timeout=RUNTIME + WARMUP + 60)
    ccpu = (k1 - k0) / (t1 - t0) if k0 is not None and k1 is not None else None
    return out, (c1 - c0) / (t1 - t0), ccpu


def per_io(r, cpu, ccpu):
    """Add the CPU figures to a result: fractions of a core, and microseconds per I/O."""
    r["cpu"] = cpu
    r["us_per_io"] = cpu * 1e6 / r["iops"] if r["iops"] else None
    r["ccpu"] = ccpu
    r["client_us_per_io"] = ccpu * 1e6 / r["iops"] if r["iops"] and ccpu is not None else None
    return r


class Targets:
    def __init__(self, ebof_bin, work):
        self.work = work
        self.ebof = subprocess.Popen(
            ["taskset", "-c", str(TCORE), ebof_bin, "serve", "--listen",
             f"127.0.0.1:{EBOF_PORT}", "--ram", f"{RAM_MB}M", "--cores", str(TCORE)],
            stdout=open(os.path.join(work, "ebof.log"), "w"), stderr=subprocess.STDOUT)
        PROCS.append(self.ebof)
        wait_port(EBOF_PORT, self.ebof, "ebof serve")
        self.spdk = subprocess.Popen(
            [spdk_bin("nvmf_tgt"), "-m", hex(1 << TCORE), "-r", os.path.join(work, "spdk.sock")],
            stdout=open(os.path.join(work, "nvmf_tgt.log"), "w"), stderr=subprocess.STDOUT)
        PROCS.append(self.spdk)
        rpc_sock = os.path.join(work, "spdk.sock")
        for _ in range(100):
            if os.path.exists(rpc_sock):
                break
            if self.spdk.poll() is not None:
                die("nvmf_tgt exited; see " + os.path.join(work, "nvmf_tgt.log"))
            time.sleep(0.1)
        rpc = ["/usr/bin/python3", os.path.join(SPDK, "scripts/rpc.py"), "-s", rpc_sock]
        for cmd in (["nvmf_create_transport", "-t", "TCP"],
                    ["bdev_malloc_create", "-b", "Malloc0", str(RAM_MB), "512"],
                    ["nvmf_create_subsystem", SPDK_NQN, "-a", "-s", "SPDK00000000000001"],
                    ["nvmf_subsystem_add_ns", SPDK_NQN, "Malloc0"],
                    ["nvmf_subsystem_add_listener", SPDK_NQN, "-t", "tcp", "-a", "127.0.0.1",
                     "-s", str(SPDK_PORT)]):
            subprocess.run(rpc + cmd, check=True, stdout=subprocess.DEVNULL, timeout=60)
        wait_port(SPDK_PORT, self.spdk, "nvmf_tgt")
        self.active = None

    def pid(self, which):
        return (self.ebof if which == "ebof" else self.spdk).pid

    def only(self, which):
        """Run `which`, freeze the other (a frozen nvmf_tgt does not spin)."""
        if self.active == which:
            return
        other = "spdk" if which == "ebof" else "ebof"
        os.kill(self.pid(other), signal.SIGSTOP)
        os.kill(self.pid(which), signal.SIGCONT)
        self.active = which
        time.sleep(0.3)

    def both(self):
        for w in ("ebof", "spdk"):
            os.kill(self.pid(w), signal.SIGCONT)
        self.active = None

    def endpoint(self, which):
        return (EBOF_PORT, EBOF_NQN) if which == "ebof" else (SPDK_PORT, SPDK_NQN)


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


def target_table(t):
    res = {}
    for rnd in range(ROUNDS):
        for wl in TARGET_WORKLOADS:
            order = ("ebof", "spdk") if (rnd % 2 == 0) else ("spdk", "ebof")
            for which in order:
                t.only(which)
                port, nqn = t.endpoint(which)
                name, pattern, bs, qd, mix = wl
                out, cpu, ccpu = run_measured(
                    spdk_perf_args(port, nqn, pattern, bs, qd, mix, hex(1 << CCORE)),
                    t.pid(which))
                r = parse_spdk_perf(out)
                if r is None:
                    log(f"  {which} {name}: no result\n{out[-2000:]}")
                    continue
                r["round"] = rnd
                res.setdefault((name, which), []).append(per_io(r, cpu, ccpu))
                log(f"  round {rnd + 1} {which:4} {name:22} {r['iops']:>10,.0f} IOPS "
                    f"{r['mib_s']:>8,.0f} MiB/s  p99 {r.get('p99_us', 0):8.1f} us  "
                    f"target CPU {cpu * 100:5.1f} %")
    return res


def ratios(a, b):
    """ebof/SPDK IOPS ratios of two result lists: of the medians, of the best rounds, and the
    median [min-max] of the per-round paired ratios. Empty strings when one side is missing."""
    ia, ib = [r["iops"] for r in a], [r["iops"] for r in b]
    if not ia or not ib or not statistics.median(ib) or not max(ib):
        return "", "", ""
    med = f"**{statistics.median(ia) / statistics.median(ib):.2f}x**"
    best = f"{max(ia) / max(ib):.2f}x"
    by_round = {r["round"]: r["iops"] for r in b if "round" in r}
    paired = [r["iops"] / by_round[r["round"]] for r in a
              if by_round.get(r.get("round")) and r["iops"]]
    pr = median_mm(paired)
    return med, best, (f"{pr[0]:.2f} [{pr[1]:.2f}-{pr[2]:.2f}]" if pr else "")


def table_rows(res, workloads, labels, cpu_keys):
    """Markdown rows: per workload, ebof then SPDK, medians [min-max] and the best round; the
    ratios (medians, best rounds, paired rounds) on SPDK's row."""
    for name, *_ in workloads:
        for which in ("ebof", "spdk"):
            rs = res.get((name, which), [])
            if not rs:
                continue
            g = lambda k: median_mm([r[k] for r in rs if r.get(k) is not None])  # noqa: E731
            lat = " / ".join(f"{g(k)[0]:.1f}" if g(k) else "-"
                             for k in ("avg_us", "p50_us", "p99_us", "p99_99_us"))
            med = best = paired = ""
            if which == "spdk":
                med, best, paired = ratios(res.get((name, "ebof"), []), rs)
            cells = [name, labels[which], fmt(g("iops")), f"{max(r['iops'] for r in rs):,.0f}",
                     fmt(g("mib_s")), lat]
            for frac_key, per_io_key in cpu_keys:
                cpu = g(frac_key)
                cells.append(fmt((cpu[0] * 100, cpu[1] * 100, cpu[2] * 100) if cpu else None))
                cells.append(fmt(g(per_io_key), 2))
            print("| " + " | ".join(cells + [med, best, paired]) + " |")


RATIO_HEADS = "ebof/SPDK medians | best/best | paired rounds"


def print_target_table(res):
    print("\n### Same client (spdk_nvme_perf) -> target, "
          f"target on core {TCORE}, client on core {CCORE}; median [min-max] of {ROUNDS} rounds "
          f"of {RUNTIME} s\n")
    print("| workload | target | IOPS | best IOPS | MiB/s | avg / p50 / p99 / p99.99 us "
          f"| target CPU % | target CPU us per I/O | {RATIO_HEADS} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    table_rows(res, TARGET_WORKLOADS, {"ebof": "ebof serve", "spdk": "SPDK nvmf_tgt"},
               [("cpu", "us_per_io")])


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
                    out, cpu, ccpu = run_measured(
                        spdk_perf_args(SPDK_PORT, SPDK_NQN, pattern, bs, qd, mix,
                                       hex(1 << CCORE)), t.pid("spdk"))
                    r = parse_spdk_perf(out)
                else:
                    out, cpu, ccpu = run_measured(ebof_perf_args(ebof_bin, pattern, bs, qd, mix),
                                                  t.pid("spdk"))
                    try:
                        j = json.loads(out[out.index("{"):])
                        lat = j["latency_us"]
                        r = {"iops": j["iops"], "mib_s": j["mib_s"], "avg_us": lat["avg"],
                             "p50_us": lat["p50"], "p99_us": lat["p99"],
                             "p99_99_us": lat["p99_99"]}
                    except (ValueError, KeyError):
                        r = None
                if r is None:
                    log(f"  {client} {name}: no result\n{out[-2000:]}")
                    continue
                r["round"] = rnd
                res.setdefault((name, client), []).append(per_io(r, cpu, ccpu))
                log(f"  round {rnd + 1} {client:4} {name:22} {r['iops']:>10,.0f} IOPS "
                    f"{r['mib_s']:>8,.0f} MiB/s  avg {r['avg_us']:7.1f} us  client CPU "
                    f"{(ccpu or 0) * 100:5.1f} %")
    return res


def print_client_table(res):
    print("\n### Same target (SPDK nvmf_tgt, core "
          f"{TCORE}) <- client on core {CCORE}; median [min-max] of {ROUNDS} rounds of "
          f"{RUNTIME} s\n")
    print("| workload | client | IOPS | best IOPS | MiB/s | avg / p50 / p99 / p99.99 us "
          f"| client CPU % | client CPU us per I/O | {RATIO_HEADS} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    table_rows(res, CLIENT_WORKLOADS, {"ebof": "ebof perf", "spdk": "spdk_nvme_perf"},
               [("ccpu", "client_us_per_io")])


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
            out, _, _ = run_measured(spdk_perf_args(port, EBOF_NQN, "randread", 4096, 32, None,
                                                    "0x3"), srv.pid)
            r = parse_spdk_perf(out)
            if r:
                spdk_vals.append(r["iops"])
            out, _, _ = run_measured(
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
""")
        self.ebof = subprocess.Popen(["taskset", "-c", str(TCORE), ebof_bin, "serve", "--config", cfg],
                                     stdout=open(os.path.join(work, "ebof-tls.log"), "w"),
                                     stderr=subprocess.STDOUT)
        PROCS.append(self.ebof)
        wait_port(self.ports[("ebof", False)], self.ebof, "ebof serve (TLS)")
        sock = os.path.join(work, "spdk-tls.sock")
        self.spdk = subprocess.Popen([spdk_bin("nvmf_tgt"), "-m", hex(1 << TCORE), "-r", sock],
                                     stdout=open(os.path.join(work, "nvmf_tgt-tls.log"), "w"),
                                     stderr=subprocess.STDOUT)
        PROCS.append(self.spdk)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        rpc = ["/usr/bin/python3", os.path.join(SPDK, "scripts/rpc.py"), "-s", sock]
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
                "p50_us": lat["p50"], "p99_us": lat["p99"], "p99_99_us": lat["p99_99"]}
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
                    out, cpu, ccpu = run_measured(
                        tls_client_args(client, ebof_bin, t, target, tls, pattern, bs, qd), pid)
                    r = parse_spdk_perf(out) if client == "spdk" else parse_ebof_perf(out)
                    if r is None:
                        log(f"  {client}->{target} tls={tls} {name}: no result\n{out[-1500:]}")
                        continue
                    r["round"] = rnd
                    res.setdefault((name, target, client, tls), []).append(per_io(r, cpu, ccpu))
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
          "| target CPU % | target CPU us per I/O | client CPU us per I/O | TLS/plain IOPS "
          "| TLS: ebof/SPDK target (medians, best, paired) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
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
                    fmt(g("us_per_io"), 2), fmt(g("client_us_per_io"), 2), ratio, vs]) + " |")
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
    for port in (EBOF_PORT, SPDK_PORT, EBOF_PORT + 2, EBOF_PORT + 4, EBOF_PORT + 5,
                 EBOF_PORT + 6, SPDK_PORT + 10, SPDK_PORT + 11):
        if port_open(port):
            die(f"port {port} is in use")
    with open("/proc/mounts") as f:
        if not any(ln.split()[2:3] == ["hugetlbfs"] for ln in f):
            # DPDK needs a hugetlbfs mount (containers often have none)
            os.makedirs("/dev/hugepages", exist_ok=True)
            subprocess.run(["mount", "-t", "hugetlbfs", "nodev", "/dev/hugepages"], check=True)
    with open("/proc/sys/vm/nr_hugepages") as f:
        if int(f.read()) < 1024:
            with open("/proc/sys/vm/nr_hugepages", "w") as w:
                w.write("1024")
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
                print_target_table(target_table(t))
            if ONLY in ("", "client"):
                log("== client table")
                print_client_table(client_table(t, ebof_bin))
            if ONLY in ("", "idle"):
                idle_cpu(t)
            t.both()
            if ONLY in ("", "scale"):
                os.kill(t.pid("spdk"), signal.SIGSTOP)
                scale(ebof_bin, work)
                os.kill(t.pid("spdk"), signal.SIGCONT)
        if ONLY in ("", "tls"):
            # A second nvmf_tgt cannot start beside the first (shared memory, hugepages).
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
