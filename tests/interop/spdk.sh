#!/usr/bin/env bash
# SPDK's host tools against `ebof serve`, unchanged: spdk_nvme_perf (with and without a host
# NQN, with header and data digests, 4K and 128K, reads, writes and mixes, several qpairs),
# spdk_nvme_identify, spdk_nvme_discover, and bdevperf -w verify through SPDK's NVMe bdev.
#
# Not part of the default test command (it needs a built SPDK, outside this repository):
#   SPDK_DIR=/path/to/spdk tests/interop/spdk.sh
# Needs root (hugepages). Knobs: EBOF_BIN (default: build target/release/ebof), PORT (14430),
# RUNTIME (3 s per perf run). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

if [[ -z ${SPDK_DIR:-} || ! -d ${SPDK_DIR:-} ]]; then
	echo "spdk interop: set SPDK_DIR to a built SPDK tree (see docs/guide/bench.md)" >&2
	exit 1
fi
bin() { # bin NAME: path of an SPDK binary
	local p
	for p in "$SPDK_DIR/build/bin/$1" "$SPDK_DIR/build/examples/$1"; do
		if [[ -x $p ]]; then
			echo "$p"
			return
		fi
	done
	echo "spdk interop: $1 not found under $SPDK_DIR/build" >&2
	exit 1
}
PERF=$(bin spdk_nvme_perf)
IDENTIFY=$(bin spdk_nvme_identify)
DISCOVER=$(bin spdk_nvme_discover)
BDEVPERF=$(bin bdevperf)
PORT=${PORT:-14430}
RUNTIME=${RUNTIME:-3}
NQN=nqn.2026-11.io.ebof:spdk-interop
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5e1f0a2c-9b7d-4c1e-8f3a-2d6b7c8e9f01

if [[ -z ${EBOF_BIN:-} ]]; then
	cargo build --release --locked -p ebof --quiet
	EBOF_BIN=$PWD/target/release/ebof
fi
if ! grep -q ' hugetlbfs ' /proc/mounts; then # DPDK needs one; containers often have none
	mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages
fi
if (($(cat /proc/sys/vm/nr_hugepages) < 1024)); then
	echo 1024 >/proc/sys/vm/nr_hugepages
fi

WORK=$(mktemp -d)
SERVE_PID=''
cleanup() {
	if [[ -n $SERVE_PID ]]; then
		kill "$SERVE_PID" 2>/dev/null || true
		wait "$SERVE_PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/ebof.toml" <<EOF
[[listeners]]
address = "127.0.0.1"
port = $PORT

[[subsystems]]
nqn = "$NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "256M"
block_size = 512

[[subsystems.namespaces]]
nsid = 2
backend = "file"
path = "$WORK/ns2.img"
size = "64M"
block_size = 4096
EOF
"$EBOF_BIN" serve --config "$WORK/ebof.toml" >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 100); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then break; fi
	if ! kill -0 "$SERVE_PID" 2>/dev/null; then
		cat "$WORK/serve.log" >&2
		exit 1
	fi
	sleep 0.1
done

TRID="trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"
PASS=0
fail() {
	echo "FAIL: $*" >&2
	echo "--- ebof serve log (tail)" >&2
	tail -20 "$WORK/serve.log" >&2
	exit 1
}
ok() {
	PASS=$((PASS + 1))
	echo "ok   $*"
}

perf() { # perf LABEL TRID ARGS...: a run must end with exit 0, I/O done and no I/O errors
	local label=$1 trid=$2
	shift 2
	local out
	if ! out=$(timeout $((RUNTIME + 60)) "$PERF" -t "$RUNTIME" -c 0x1 -r "$trid" "$@" 2>&1); then
		echo "$out" | tail -20 >&2
		fail "spdk_nvme_perf $label"
	fi
	local iops
	iops=$(echo "$out" | awk '/^Total/{print $3}')
	if [[ -z $iops ]] || ! awk -v v="$iops" 'BEGIN{exit !(v > 0)}'; then
		echo "$out" | tail -20 >&2
		fail "spdk_nvme_perf $label: no I/O completed"
	fi
	# The only error line allowed is the disconnect notice perf prints at its own exit.
	if echo "$out" | grep -iE "error|fail" | grep -qv "CQ transport error -6"; then
		echo "$out" | grep -iE "error|fail" | head -5 >&2
		fail "spdk_nvme_perf $label: errors reported"
	fi
	ok "spdk_nvme_perf $label: $iops IOPS"
}

echo "== spdk_nvme_perf against ebof serve on 127.0.0.1:$PORT"
perf "4K randread, no host NQN" "$TRID" -q 32 -o 4096 -w randread
perf "4K randread, hostnqn given" "$TRID hostnqn:$HOSTNQN" -q 32 -o 4096 -w randread
perf "4K randwrite" "$TRID" -q 32 -o 4096 -w randwrite
perf "4K randrw 70/30" "$TRID" -q 32 -o 4096 -w randrw -M 70
perf "128K read" "$TRID" -q 16 -o 131072 -w read
perf "128K write" "$TRID" -q 16 -o 131072 -w write
perf "128K randrw 50/50" "$TRID" -q 16 -o 131072 -w randrw -M 50
perf "4K randrw, header+data digests" "$TRID" -q 32 -o 4096 -w randrw -M 50 -H -I
perf "128K randrw, header+data digests" "$TRID" -q 8 -o 131072 -w randrw -M 50 -H -I
perf "4K randrw, 4 qpairs" "$TRID" -q 16 -o 4096 -w randrw -M 50 -P 4
perf "4K randread QD1" "$TRID" -q 1 -o 4096 -w randread

echo "== spdk_nvme_identify"
out=$(timeout 60 "$IDENTIFY" -r "$TRID" 2>&1) || {
	echo "$out" | tail -20 >&2
	fail "spdk_nvme_identify"
}
for want in "Model Number: *ebof" "Subsystem NQN: *$NQN" "Active Namespaces" "Namespace ID:2"; do
	echo "$out" | grep -qE "$want" || fail "spdk_nvme_identify: no '$want' in its output"
done
ok "spdk_nvme_identify: model, subsystem NQN and both namespaces"

echo "== spdk_nvme_discover"
# It waits for discovery events until interrupted.
out=$(timeout -s INT 5 "$DISCOVER" -r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT" 2>&1) || true
echo "$out" | grep -q "$NQN" || {
	echo "$out" | tail -20 >&2
	fail "spdk_nvme_discover: $NQN not in the discovery log"
}
ok "spdk_nvme_discover: $NQN listed"

echo "== bdevperf -w verify through SPDK's NVMe bdev (both namespaces)"
cat >"$WORK/bdev.json" <<EOF
{"subsystems": [{"subsystem": "bdev", "config": [
  {"method": "bdev_nvme_attach_controller",
   "params": {"name": "ebof", "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1",
              "trsvcid": "$PORT", "subnqn": "$NQN"}}]}]}
EOF
out=$(timeout $((RUNTIME + 120)) "$BDEVPERF" -m 0x1 -r "$WORK/bdevperf.sock" --json "$WORK/bdev.json" \
	-q 32 -o 4096 -w verify -t "$RUNTIME" 2>&1) || {
	echo "$out" | tail -30 >&2
	fail "bdevperf verify"
}
for b in ebofn1 ebofn2; do
	echo "$out" | grep -q "$b" || {
		echo "$out" | tail -30 >&2
		fail "bdevperf verify: $b did not run"
	}
done
if echo "$out" | grep -qiE "miscompare|io_error|verify failed"; then
	echo "$out" | grep -iE "miscompare|io_error|verify failed" | head >&2
	fail "bdevperf verify: data errors"
fi
ok "bdevperf -w verify on ebofn1 (RAM) and ebofn2 (file)"

if grep -q "connect rejected" "$WORK/serve.log"; then
	grep "connect rejected" "$WORK/serve.log" >&2
	fail "ebof serve rejected a Connect"
fi
echo "spdk interop: all $PASS checks passed"
