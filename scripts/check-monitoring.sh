#!/usr/bin/env bash
# deploy/monitoring/: generated files up to date (the PrometheusRule cannot drift from
# ebof-alerts.yml), `promtool check rules`/`test rules`/`check config`, the dashboards parsed,
# the kustomization's files present, and against a live `ebof serve` on loopback (pools, a CDC
# member, a mirrored namespace, ANA): `promtool check metrics` on its scrape, and every metric
# name a dashboard or rule uses found in it. Unpacks Debian's `prometheus` (promtool) under
# target/ where it is missing. EBOF_BIN: the ebof binary (default target/debug/ebof, built if
# missing). With Debian's prometheus there too, a real Prometheus scrapes the box under `ebof perf`
# and evaluates every dashboard query and rule (~10 s in all).
set -euo pipefail
cd "$(dirname "$0")/.."
M=deploy/monitoring

# Debian's prometheus package unpacked under target/ (not installed: installing it would start
# a Prometheus service on a machine with systemd): promtool and prometheus from there.
PROM=$PWD/target/prometheus
if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$PROM/usr/bin/promtool" ] && command -v apt-get >/dev/null 2>&1; then
    echo "apt-get download prometheus (promtool), unpacked in $PROM"
    dl=$(mktemp -d)
    (cd "$dl" && { apt-get download prometheus >/dev/null 2>&1 ||
        { apt-get update -qq && apt-get download prometheus >/dev/null; }; }) &&
        mkdir -p "$PROM" && dpkg-deb -x "$dl"/prometheus_*.deb "$PROM"
    rm -rf "$dl"
fi
[ -x "$PROM/usr/bin/promtool" ] && export PATH="$PROM/usr/bin:$PATH"
command -v promtool >/dev/null 2>&1 || { echo "check-monitoring: promtool is missing (Debian: apt-get install prometheus)" >&2; exit 1; }
promtool --version 2>&1 | head -1

python3 $M/generate.py --check
promtool check rules $M/ebof-alerts.yml
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# The PrometheusRule's spec is a rules file too.
sed '1,/^spec:$/d; s/^  //' $M/prometheus-rule.yaml > "$work/spec-rules.yml"
promtool check rules "$work/spec-rules.yml"
promtool test rules $M/tests.yml
promtool check config $M/prometheus.yml

# A box with every kind of series: a pool, a CDC member (unreachable), a mirrored namespace
# (peer and witness unreachable), a non-optimized ANA group.
BIN=${EBOF_BIN:-target/debug/ebof}
[ -x "$BIN" ] || cargo build -q --locked -p ebof
A=127.0.0.211
mkdir -p "$work/pool" "$work/state"
cat > "$work/box.toml" <<EOF
[target]
state_dir = "$work/state"
[[listeners]]
address = "$A"
port = 4420
[discovery]
mdns = false
[cdc]
members = ["$A:11"]
[mirror]
witness = "$A:10"
[metrics]
listen = "$A:9464"
per_host_io = true
[management]
socket = "$work/ebof.sock"
[[pools]]
name = "fast"
directory = "$work/pool"
size = "1G"
[[subsystems]]
nqn = "nqn.2026-11.io.ebof:monitoring"
allow_any_host = true
[[subsystems.namespaces]]
backend = "ram"
size = "4M"
qos = { iops = 3000 }
[[subsystems.namespaces]]
backend = "file"
pool = "fast"
path = "$work/pool/p.img"
size = "16M"
[[subsystems.namespaces]]
backend = "file"
path = "$work/m.img"
size = "4M"
ana_group = 2
mirror = { peer = "$A:9", role = "primary" }
[[ana]]
listener = "$A:4420"
group = 1
state = "non-optimized"
EOF
"$BIN" serve -c "$work/box.toml" >"$work/serve.log" 2>&1 &
pid=$!
python3 - "$A:9464" "$work" <<'EOF' || { cat "$work/serve.log" >&2; exit 1; }
import json, re, sys, time, urllib.request
from pathlib import Path
addr, work = sys.argv[1], Path(sys.argv[2])
def scrape(accept):
    req = urllib.request.Request(f"http://{addr}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.headers.get("Content-Type"), r.read().decode()
deadline = time.time() + 20
while True:
    try:
        ctype, text = scrape("text/plain; version=0.0.4")
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("check-monitoring: ebof serve's /metrics did not answer in 20 s")
        time.sleep(0.1)
assert ctype.startswith("text/plain; version=0.0.4"), ctype
(work / "scrape.txt").write_text(text)
ctype, om = scrape("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
assert ctype.startswith("application/openmetrics-text") and om.endswith("# EOF\n"), ctype
names, histograms = set(), set()
for line in text.splitlines():
    m = re.match(r"# (HELP|TYPE) (\S+)", line)
    if m:
        names.add(m.group(2))
        if line.endswith(" histogram"):
            histograms.add(m.group(2))
    elif line and not line.startswith("#"):
        names.add(re.match(r"[^{ ]+", line).group(0))
for h in histograms:
    names |= {h + "_bucket", h + "_sum", h + "_count"}
used = {}
for d in sorted(Path("deploy/monitoring/dashboards").glob("*.json")):
    dash = json.loads(d.read_text())
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"], d
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert panels, d
    for p in panels:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", (d, p["title"])
        assert p["targets"], (d, p["title"])
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${DS_PROMETHEUS}", (d, p["title"])
            for n in re.findall(r"\bebof_[a-z0-9_]+", t["expr"]):
                used.setdefault(n, f"{d.name}: {p['title']}")
    for v in dash["templating"]["list"]:
        for n in re.findall(r"\bebof_[a-z0-9_]+", v["query"]["query"]):
            used.setdefault(n, f"{d.name}: variable {v['name']}")
rules = Path("deploy/monitoring/ebof-alerts.yml").read_text()
for n in re.findall(r"\bebof_[a-z0-9_]+", "\n".join(l for l in rules.splitlines() if "expr:" in l)):
    used.setdefault(n, "ebof-alerts.yml")
missing = sorted(f"{n} ({where})" for n, where in used.items() if n not in names)
if missing:
    sys.exit("check-monitoring: not in ebof's exposition: " + ", ".join(missing))
kust = Path("deploy/monitoring/kustomization.yaml").read_text()
for f in re.findall(r"^\s+- (\S+\.(?:yaml|json))$", kust, re.M):
    assert Path("deploy/monitoring", f).is_file(), f
assert 'grafana_dashboard: "1"' in kust
print(f"check-monitoring: {len(used)} metric names used by {len(list(Path('deploy/monitoring/dashboards').glob('*.json')))} dashboards and the rules, all in a live scrape ({len(names)} names)")
EOF
# The per-host series (`per_host_io = true`) with samples: a short run, then the scrape promtool
# checks holds them.
"$BIN" perf -a $A -n nqn.2026-11.io.ebof:monitoring --nsid 1 --rw randrw --qd 4 --runtime 1s >/dev/null
sleep 1.2
python3 - "$A:9464" "$work/scrape.txt" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(f"http://{sys.argv[1]}/metrics", headers={"Accept": "text/plain; version=0.0.4"})
text = urllib.request.urlopen(req, timeout=5).read().decode()
for want in ('ebof_host_read_commands_total{hostnqn="', 'ebof_host_write_latency_seconds_sum{hostnqn="'):
    assert want in text, f"check-monitoring: no {want} in the scrape"
open(sys.argv[2], "w").write(text)
EOF
promtool check metrics < "$work/scrape.txt"
echo "check-monitoring: promtool check metrics: no problems"

# A real Prometheus (the same package's) scrapes the box each second while `ebof perf` loads it;
# then it evaluates every dashboard query and every rule: none may fail, and the queries of the
# I/O, latency, QoS, capacity, CDC, ANA and replication panels must return data.
command -v prometheus >/dev/null 2>&1 || { echo "check-monitoring: no prometheus binary: live query check skipped"; exit 0; }
cp $M/ebof-alerts.yml "$work/"
cat > "$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ebof
    static_configs:
      - targets: ["$A:9464"]
        labels:
          zone: test
rule_files:
  - ebof-alerts.yml
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="$A:9090" --log.level=warn >"$work/prometheus.log" 2>&1 &
prom=$!
trap 'kill $prom 2>/dev/null; wait $prom 2>/dev/null; cleanup' EXIT
"$BIN" perf -a $A -n nqn.2026-11.io.ebof:monitoring --nsid 1 --rw randrw --qd 8 --runtime 4s >"$work/perf.txt"
"$BIN" perf -a $A -n nqn.2026-11.io.ebof:monitoring --nsid 2 --rw randwrite --qd 4 --runtime 1s >>"$work/perf.txt"
python3 - "$A:9090" <<'EOF' || { cat "$work/prometheus.log" >&2; exit 1; }
import json, re, sys, time, urllib.parse, urllib.request
from pathlib import Path
base = f"http://{sys.argv[1]}/api/v1/"
def get(path, **q):
    url = base + path + ("?" + urllib.parse.urlencode(q) if q else "")
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())
deadline = time.time() + 20
while True:
    try:
        if get("query", query="up")["data"]["result"]:
            break
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit("check-monitoring: prometheus did not scrape the box in 20 s")
    time.sleep(0.2)
time.sleep(2)
# Panels whose queries must have data here; the others (errors, failures, live controllers)
# may be empty on a healthy box.
need = re.compile(r"IOPS|Bandwidth|latency|Latency|QoS|Pool|Thin|Version|Subsystems|Boxes|CDC|ANA|Mirror|Resync")
empty, checked = [], 0
for d in sorted(Path("deploy/monitoring/dashboards").glob("*.json")):
    for p in json.loads(d.read_text())["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", "15s")
            expr = re.sub(r"\$(instance|subsystem|zone)", ".*", expr)
            r = get("query", query=expr)
            assert r["status"] == "success", (d.name, p["title"], expr, r)
            checked += 1
            if not r["data"]["result"]:
                if need.search(p["title"]):
                    sys.exit(f"check-monitoring: no data for {d.name} '{p['title']}': {expr}")
                empty.append(f"{d.name} '{p['title']}' {t['refId']}")
rules = [r for g in get("rules")["data"]["groups"] for r in g["rules"]]
bad = [r["name"] for r in rules if r["health"] != "ok"]
assert rules and not bad, bad
active = sorted({r["name"] for r in rules if r.get("alerts")})
print(f"check-monitoring: prometheus answered {checked} dashboard queries under load "
      f"({len(empty)} empty on a healthy box: {', '.join(empty)}); {len(rules)} rules healthy; "
      f"pending or firing here: {', '.join(active)}")
EOF
