#!/usr/bin/env bash
# Loopback benchmark: `ebof perf` (host, pinned to one core) against `ebof serve` (target, a RAM
# namespace, pinned to another core). Prints IOPS, MB/s, p50/p99 latency and the host's CPU time
# per I/O for 4K random read QD32 and 128K sequential read QD32. Not a test: it prints figures.
#
# Knobs (environment): EBOF_BENCH_PORT (14421), EBOF_BENCH_RUNTIME (10s), EBOF_BENCH_RAMP (2s),
# EBOF_BENCH_HOST_CORE (0), EBOF_BENCH_TARGET_CORE (1), EBOF_BENCH_RAM (256M),
# EBOF_BENCH_POLL_US (`serve --poll-us`: 100, the default, polls adaptively; 0 is purely
# event-driven), EBOF_BENCH_PERF_ARGS (extra `ebof perf` flags, e.g. --no-busy-poll).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PORT=${EBOF_BENCH_PORT:-14421}
RUNTIME=${EBOF_BENCH_RUNTIME:-10s}
RAMP=${EBOF_BENCH_RAMP:-2s}
HOST_CORE=${EBOF_BENCH_HOST_CORE:-0}
TARGET_CORE=${EBOF_BENCH_TARGET_CORE:-1}
RAM=${EBOF_BENCH_RAM:-256M}
POLL_US=${EBOF_BENCH_POLL_US:-100}
read -r -a PERF_EXTRA <<<"${EBOF_BENCH_PERF_ARGS:-}"

echo "== building (release)"
cargo build --release -p ebof --quiet
BIN=$PWD/target/release/ebof

pin() { # pin CORE CMD...: taskset when available (perf also pins its own worker threads)
	local core=$1
	shift
	if command -v taskset >/dev/null 2>&1; then taskset -c "$core" "$@"; else "$@"; fi
}

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

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }
if port_open; then
	echo "port $PORT is already in use; set EBOF_BENCH_PORT" >&2
	exit 1
fi

echo "== starting ebof serve on 127.0.0.1:$PORT (RAM $RAM, core $TARGET_CORE)"
# Started directly (not through a shell function) so that $! is the server's own PID: taskset
# execs the program it runs.
SERVE_ARGS=(serve --listen "127.0.0.1:$PORT" --ram "$RAM" --cores "$TARGET_CORE" --poll-us "$POLL_US")
if command -v taskset >/dev/null 2>&1; then
	taskset -c "$TARGET_CORE" "$BIN" "${SERVE_ARGS[@]}" >"$WORK/serve.log" 2>&1 &
else
	"$BIN" "${SERVE_ARGS[@]}" >"$WORK/serve.log" 2>&1 &
fi
SERVE_PID=$!
for _ in $(seq 1 150); do
	if ! kill -0 "$SERVE_PID" 2>/dev/null; then
		cat "$WORK/serve.log" >&2
		echo "ebof serve exited" >&2
		exit 1
	fi
	if port_open; then break; fi
	sleep 0.2
done
if ! port_open; then
	echo "ebof serve did not listen on port $PORT within 30 s" >&2
	exit 1
fi

NQN=$("$BIN" discover -a 127.0.0.1 -s "$PORT" | awk '/^subtype: nvme subsystem/{f=1} f && /^subnqn:/{print $2; exit}')
if [[ -z $NQN ]]; then
	echo "no NVM subsystem in the discovery log" >&2
	exit 1
fi
echo "== subsystem $NQN"

perf() { # perf NAME ARGS...: one run, JSON kept in $WORK/NAME.json
	local name=$1
	shift
	pin "$HOST_CORE" "$BIN" perf -a 127.0.0.1 -s "$PORT" -n "$NQN" --cores "$HOST_CORE" --json "${PERF_EXTRA[@]}" "$@" >"$WORK/$name.json"
}

echo "== preconditioning (sequential 128K writes over the namespace)"
perf precondition --rw write --bs 128k --qd 32 --runtime 3s >/dev/null

declare -a NAMES=()
echo "== 4K random read, QD32, $RUNTIME (+$RAMP ramp)"
perf randread-4k --rw randread --bs 4k --qd 32 --runtime "$RUNTIME" --ramp "$RAMP" && NAMES+=(randread-4k)
echo "== 128K sequential read, QD32, $RUNTIME (+$RAMP ramp)"
perf read-128k --rw read --bs 128k --qd 32 --runtime "$RUNTIME" --ramp "$RAMP" && NAMES+=(read-128k)

echo
printf '%-12s %12s %10s %10s %10s %12s %8s\n' test IOPS MB/s p50_us p99_us cpu_us/IO errors
for n in "${NAMES[@]}"; do
	if command -v jq >/dev/null 2>&1; then
		jq -r --arg n "$n" '[$n, (.iops|floor), .mb_s, .latency_us.p50, .latency_us.p99, .cpu.us_per_io, .errors.total]
			| @tsv' "$WORK/$n.json" | awk -F'\t' '{printf "%-12s %12s %10s %10s %10s %12s %8s\n", $1, $2, $3, $4, $5, $6, $7}'
	else
		python3 - "$n" "$WORK/$n.json" <<'PY'
import json, sys
n, p = sys.argv[1], sys.argv[2]
j = json.load(open(p))
print("%-12s %12d %10s %10s %10s %12s %8s" % (n, j["iops"], j["mb_s"], j["latency_us"]["p50"],
      j["latency_us"]["p99"], j["cpu"]["us_per_io"], j["errors"]["total"]))
PY
	fi
done
echo
echo "host: ebof perf pinned to core $HOST_CORE; target: ebof serve pinned to core $TARGET_CORE; loopback TCP"
