#!/usr/bin/env bash
# Encryption at rest on loopback (issue 37's goals; not a test: it prints figures).
#
# One `ebof serve` on one core with two file namespaces in the same directory, the same size:
# nsid 1 plain, nsid 2 encrypted (AES-XTS-256, aes-xts-plain64, its own key). Both files are
# filled with random bytes first (a never-written encrypted sector reads as a zero check, not a
# decryption). Then
# paired rounds, plain and encrypted back to back (the order alternating), of `ebof perf`
# pinned to another core:
#   - 4K random read and write, QD32   (goal: encrypted >= 0.8x plain)
#   - 128K sequential read and write, QD32 (goal: encrypted >= 0.6x plain)
# and prints the median IOPS / MB/s of each, the ratio, the cipher's own single-core rate
# (examples/xts_rate.rs) and the load average (the machine may be shared).
#
# Knobs: EBOF_BENCH_RUNTIME (5s), EBOF_BENCH_RAMP (1s), EBOF_BENCH_ROUNDS (3),
# EBOF_BENCH_SIZE (512M per namespace), EBOF_BENCH_HOST_CORE (0), EBOF_BENCH_TARGET_CORE (1),
# EBOF_BENCH_PORT (14600), EBOF_BENCH_DIR (a temporary directory under target/), EBOF_BIN
# (default: a release build).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNTIME=${EBOF_BENCH_RUNTIME:-5s}
RAMP=${EBOF_BENCH_RAMP:-1s}
ROUNDS=${EBOF_BENCH_ROUNDS:-3}
SIZE=${EBOF_BENCH_SIZE:-512M}
HOST_CORE=${EBOF_BENCH_HOST_CORE:-0}
T_CORE=${EBOF_BENCH_TARGET_CORE:-1}
PORT=${EBOF_BENCH_PORT:-14600}
NQN=nqn.2026-11.io.ebof:bench-crypt

if [[ -z ${EBOF_BIN:-} ]]; then
	echo "== building (release)"
	cargo build --release -p ebof --quiet
	EBOF_BIN=$PWD/target/release/ebof
fi
BIN=$EBOF_BIN
cargo build --release -p ebof-backend --example xts_rate --quiet

mkdir -p target
WORK=$(mktemp -d "${EBOF_BENCH_DIR:-$PWD/target}/bench-crypt.XXXXXX")
PID=
cleanup() {
	if [[ -n $PID ]]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if port_open "$PORT"; then
	echo "port $PORT is in use; set EBOF_BENCH_PORT" >&2
	exit 1
fi

"$BIN" crypt new-key --out "$WORK/ns.key"
cat >"$WORK/ebof.toml" <<TOML
[management]
socket = "$WORK/ebof.sock"

[[listeners]]
address = "127.0.0.1"
port = $PORT

[[subsystems]]
nqn = "$NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "file"
path = "$WORK/plain.img"
size = "$SIZE"

[[subsystems.namespaces]]
nsid = 2
backend = "file"
path = "$WORK/crypt.img"
size = "$SIZE"
encryption = { key_file = "$WORK/ns.key" }
TOML

# Both files full of random bytes before the box starts: for the encrypted namespace that is
# ciphertext of noise, so every read decrypts (a never-written sector would be a zero check).
# Each file is written the same way (plain buffered writes): a `cp` copy (copy_file_range)
# leaves the copy's pages in another state, and ext4 then spends ~2.5 us more per 4K write on
# the copy (ext4_block_write_begin), plain or encrypted alike. That was most of the 4K write
# cost first put down to encryption (ADR 0029).
echo "== filling both namespace files ($SIZE each, random)"
bytes=$(python3 -c "import sys; u={'K':1<<10,'M':1<<20,'G':1<<30}; s=sys.argv[1]; print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))" "$SIZE")
head -c "$bytes" /dev/urandom >"$WORK/plain.img"
head -c "$bytes" /dev/urandom >"$WORK/crypt.img"

if command -v taskset >/dev/null 2>&1; then
	taskset -c "$T_CORE" "$BIN" serve --config "$WORK/ebof.toml" --cores "$T_CORE" >"$WORK/serve.log" 2>&1 &
else
	"$BIN" serve --config "$WORK/ebof.toml" --cores "$T_CORE" >"$WORK/serve.log" 2>&1 &
fi
PID=$!
for _ in $(seq 1 150); do
	kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.log" >&2; exit 1; }
	port_open "$PORT" && break
	sleep 0.2
done

perf() { # perf OUT NSID ARGS...
	local out=$1 nsid=$2
	shift 2
	local run=("$BIN" perf -a 127.0.0.1 -s "$PORT" -n "$NQN" --nsid "$nsid" --cores "$HOST_CORE" --json "$@")
	if command -v taskset >/dev/null 2>&1; then run=(taskset -c "$HOST_CORE" "${run[@]}"); fi
	if ! "${run[@]}" >"$WORK/$out.json"; then
		echo "ebof perf $out failed: $(head -c 2000 "$WORK/$out.json")" >&2
		exit 1
	fi
}
# The target's CPU time (user + system, clock ticks) so far: the figures are CPU per I/O too,
# which a shared machine does not skew the way it skews rates.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
val() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j[sys.argv[2]])' "$WORK/$1.json" "$2"; }

WORKLOADS=("rr4k:randread:4k:iops" "rw4k:randwrite:4k:iops" "sr128k:read:128k:mbps" "sw128k:write:128k:mbps")
for ((r = 1; r <= ROUNDS; r++)); do
	for w in "${WORKLOADS[@]}"; do
		IFS=: read -r name rw bs _ <<<"$w"
		order=(1 2)
		((r % 2 == 0)) && order=(2 1)
		for ns in "${order[@]}"; do
			t0=$(cpu_ticks)
			perf "$name-ns$ns-r$r" "$ns" --rw "$rw" --bs "$bs" --qd 32 --runtime "$RUNTIME" --ramp "$RAMP"
			echo "$(($(cpu_ticks) - t0))" >"$WORK/$name-ns$ns-r$r.ticks"
		done
	done
	echo "   round $r/$ROUNDS done"
done

# us_per_io RUN: the target's CPU microseconds per I/O of that run (ramp included in the ticks,
# so slightly high for both alike).
us_per_io() {
	python3 -c 'import json,sys,os; j=json.load(open(sys.argv[1])); t=int(open(sys.argv[2]).read()); hz=os.sysconf("SC_CLK_TCK"); print(t / hz * 1e6 / max(j["ios"], 1))' \
		"$WORK/$1.json" "$WORK/$1.ticks"
}
median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
echo
echo "== encryption at rest: plain vs encrypted file namespace (median of $ROUNDS paired rounds)"
printf '%-26s %12s %12s %7s %6s %16s\n' workload plain encrypted ratio goal "target CPU us/IO"
for w in "${WORKLOADS[@]}"; do
	IFS=: read -r name rw bs unit <<<"$w"
	key=iops
	[[ $unit == mbps ]] && key=mb_s
	p=() c=() pc=() cc=()
	for ((r = 1; r <= ROUNDS; r++)); do
		p+=("$(val "$name-ns1-r$r" "$key")")
		c+=("$(val "$name-ns2-r$r" "$key")")
		pc+=("$(us_per_io "$name-ns1-r$r")")
		cc+=("$(us_per_io "$name-ns2-r$r")")
	done
	mp=$(median "${p[@]}") mc=$(median "${c[@]}")
	cpu="$(median "${pc[@]}" | xargs printf '%.1f') / $(median "${cc[@]}" | xargs printf '%.1f')"
	goal=0.8
	[[ $bs == 128k ]] && goal=0.6
	printf '%-26s %12.0f %12.0f %7.2f %6s %16s\n' "$bs $rw QD32 ($unit)" "$mp" "$mc" \
		"$(python3 -c "print($mc / $mp if $mp else 0)")" ">=$goal" "$cpu"
done
echo
echo "== the cipher alone (one core, examples/xts_rate.rs)"
target/release/examples/xts_rate --ours-only 2
echo
echo "host: ebof perf pinned to core $HOST_CORE; target core $T_CORE; loopback TCP; io_uring engine"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
