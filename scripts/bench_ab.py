#!/usr/bin/env python3
"""A/B of two ebof builds: `ebof perf` -> `ebof serve` (RAM, target on core 0, client on
core 1), plain and TLS 1.3 PSK, 4K randread / 128K read / 128K write at QD32, interleaved rounds,
the idle target frozen (SIGSTOP). Not a test: it prints figures. Usage: bench_ab.py BASE_BIN NEW_BIN [ROUNDS]."""
import base64, json, os, statistics, subprocess, sys, tempfile, time, zlib, socket
A, B = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
NQN = "nqn.2026-11.io.ebof:ab"
HOST = "nqn.2014-08.org.nvmexpress:uuid:ab000000-0000-0000-0000-000000000001"
key = os.urandom(32)
KEY = "NVMeTLSkey-1:01:" + base64.b64encode(key + zlib.crc32(key).to_bytes(4, "little")).decode() + ":"
work = tempfile.mkdtemp()
psk = os.path.join(work, "psk"); open(psk, "w").write(KEY); os.chmod(psk, 0o600)
WL = [("4K randread QD32", "randread", 4096, 32), ("128K read QD32", "read", 131072, 32),
      ("128K write QD32", "write", 131072, 32)]
def serve(binary, port):
    cfg = os.path.join(work, f"c{port}.toml")
    open(cfg, "w").write(f"""[target]
cores = [0]
[[listeners]]
address = "127.0.0.1"
port = {port}
[[listeners]]
address = "127.0.0.1"
port = {port+1}
tls = "required"
[[hosts]]
nqn = "{HOST}"
tls_key_file = "{psk}"
[[subsystems]]
nqn = "{NQN}"
allow_any_host = true
[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "1024M"
[management]
enabled = false
""")
    p = subprocess.Popen(["taskset", "-c", "0", binary, "serve", "--config", cfg],
                         stdout=open(cfg + ".log", "w"), stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return p
        except OSError: time.sleep(0.1)
    raise SystemExit("serve did not start")
def perf(binary, port, tls, rw, bs, qd, secs=4):
    args = ["taskset", "-c", "1", binary, "perf", "-a", "127.0.0.1", "-s", str(port + (1 if tls else 0)),
            "-n", NQN, "--hostnqn", HOST, "--rw", rw, "--bs", str(bs), "--qd", str(qd),
            "--cores", "1", "--runtime", f"{secs}s", "--ramp", "1s", "--json"]
    if tls: args += ["--tls", "--tls-key", KEY]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
    try: return json.loads(out[out.index("{"):])["mib_s"]
    except Exception: return None
procs = {"A": serve(A, 15400), "B": serve(B, 15410)}
port = {"A": 15400, "B": 15410}; bins = {"A": A, "B": B}
import signal
def only(w):
    for k, p in procs.items(): os.kill(p.pid, signal.SIGCONT if k == w else signal.SIGSTOP)
    time.sleep(0.3)
# precondition: write whole namespace on both
for w in "AB":
    only(w); perf(bins[w], port[w], False, "write", 131072, 32, secs=3)
res = {}
try:
    for r in range(ROUNDS):
        order = "AB" if r % 2 == 0 else "BA"
        for name, rw, bs, qd in WL:
            for tls in (True, False):
                for w in order:
                    only(w)
                    v = perf(bins[w], port[w], tls, rw, bs, qd)
                    res.setdefault((name, tls, w), []).append(v)
                    print(f"round {r+1} {w} {'TLS' if tls else 'tcp'} {name}: {v} MiB/s", flush=True)
finally:
    for p in procs.values():
        os.kill(p.pid, signal.SIGCONT); p.terminate(); p.wait()
print("\n| workload | transport | base MiB/s median [min-max] | new MiB/s median [min-max] | new/base |")
print("|---|---|---|---|---|")
for name, *_ in WL:
    for tls in (True, False):
        a = [v for v in res[(name, tls, "A")] if v]; b = [v for v in res[(name, tls, "B")] if v]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {name} | {'TLS' if tls else 'plain'} | {ma:,.0f} [{min(a):,.0f}-{max(a):,.0f}] | {mb:,.0f} [{min(b):,.0f}-{max(b):,.0f}] | {mb/ma:.2f} |")
