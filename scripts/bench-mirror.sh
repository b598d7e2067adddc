#!/usr/bin/env bash
# Replicated volumes on loopback (issue 34's goals; not a test: it prints figures).
#
# Three `ebof serve` boxes on 127.0.0.1: a witness, a primary and a secondary of one mirrored RAM
# namespace (and, for the baseline, the same namespace unmirrored on a box of its own). `ebof
# perf` runs pinned to one core; the boxes to the others. Prints:
#   - 4K random write QD32 and 4K random read QD32: mirrored vs unmirrored (ratio)
#   - 4K write QD1 latency: mirrored, unmirrored, and one replication round trip (a QD1 write
#     straight to the secondary's link path is not possible from outside, so the round trip is
#     measured as a QD1 write to an unmirrored box: the same work the link does)
#   - resync: the secondary stopped, EBOF_BENCH_RESYNC (1G) written on the degraded primary, the
#     secondary restarted: bytes and time until the mirror reports in-sync again
#   - failover: kill -9 of the primary → the secondary promoted by the witness → the first
#     write acknowledged by it
#
# Knobs: EBOF_BENCH_RUNTIME (10s), EBOF_BENCH_RAMP (2s), EBOF_BENCH_HOST_CORE (0),
# EBOF_BENCH_PRIMARY_CORE (1), EBOF_BENCH_SECONDARY_CORE (1), EBOF_BENCH_RAM (2G),
# EBOF_BENCH_RESYNC (1G), EBOF_BENCH_BASE_PORT (14500), EBOF_BENCH_POLL_US (the boxes'
# --poll-us, 100), EBOF_BIN (default: a release build), EBOF_BENCH_PROFILE=FILE (`perf record -g`
# of box EBOF_BENCH_PROFILE_BOX (primary) during run EBOF_BENCH_PROFILE_RUN (primary-w32)).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNTIME=${EBOF_BENCH_RUNTIME:-10s}
RAMP=${EBOF_BENCH_RAMP:-2s}
HOST_CORE=${EBOF_BENCH_HOST_CORE:-0}
P_CORE=${EBOF_BENCH_PRIMARY_CORE:-1}
S_CORE=${EBOF_BENCH_SECONDARY_CORE:-1}
RAM=${EBOF_BENCH_RAM:-2G}
RESYNC=${EBOF_BENCH_RESYNC:-1G}
BASE=${EBOF_BENCH_BASE_PORT:-14500}
POLL_US=${EBOF_BENCH_POLL_US:-100}
NQN=nqn.2026-11.io.ebof:bench-mirror

if [[ -z ${EBOF_BIN:-} ]]; then
	echo "== building (release)"
	cargo build --release -p ebof --quiet
	EBOF_BIN=$PWD/target/release/ebof
fi
BIN=$EBOF_BIN

WORK=$(mktemp -d)
declare -A PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

pin() {
	local core=$1
	shift
	if command -v taskset >/dev/null 2>&1; then taskset -c "$core" "$@"; else "$@"; fi
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
now_ms() { date +%s%3N; }

W_PORT=$BASE P_PORT=$((BASE + 1)) S_PORT=$((BASE + 2)) U_PORT=$((BASE + 3))
for p in $W_PORT $P_PORT $S_PORT $U_PORT; do
	if port_open "$p"; then
		echo "port $p is in use; set EBOF_BENCH_BASE_PORT" >&2
		exit 1
	fi
done

# box NAME PORT CORE MIRROR_TOML: write NAME.toml
box_config() {
	local name=$1 port=$2 cntlid=$3 ns=$4
	cat >"$WORK/$name.toml" <<EOF
[target]
io_threads = ${EBOF_BENCH_IO_THREADS:-4}
cntlid_min = $cntlid
cntlid_max = $((cntlid + 999))
state_dir = "$WORK/state-$name"

[management]
socket = "$WORK/$name.sock"

[[listeners]]
address = "127.0.0.1"
port = $port
$ns
EOF
	mkdir -p "$WORK/state-$name"
}

mirror_ns() { # mirror_ns PEER_PORT ROLE
	cat <<EOF

[mirror]
witness = "127.0.0.1:$W_PORT"

[[subsystems]]
nqn = "$NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "$RAM"
ana_group = 2
mirror = { peer = "127.0.0.1:$1", role = "$2" }
EOF
}

start_box() { # start_box NAME CORE PORT
	local name=$1 core=$2 port=$3
	# not through the `pin` function: a backgrounded function is a subshell whose PID is not
	# the server's, and the cleanup would leave the server running
	if command -v taskset >/dev/null 2>&1; then
		taskset -c "$core" "$BIN" serve --config "$WORK/$name.toml" --cores "$core" --poll-us "$POLL_US" >>"$WORK/$name.log" 2>&1 &
	else
		"$BIN" serve --config "$WORK/$name.toml" --cores "$core" --poll-us "$POLL_US" >>"$WORK/$name.log" 2>&1 &
	fi
	PIDS[$name]=$!
	for _ in $(seq 1 150); do
		if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
			cat "$WORK/$name.log" >&2
			echo "box $name exited" >&2
			exit 1
		fi
		port_open "$port" && return 0
		sleep 0.2
	done
	echo "box $name did not listen on $port" >&2
	exit 1
}

stop_box() { # stop_box NAME [SIGNAL]
	local name=$1 sig=${2:-TERM}
	kill "-$sig" "${PIDS[$name]}" 2>/dev/null || true
	wait "${PIDS[$name]}" 2>/dev/null || true
	unset "PIDS[$name]"
}

status_json() { "$BIN" ctl --socket "$WORK/$1.sock" --json ns mirror status "$NQN" 1 2>/dev/null || true; }
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print(d.get(sys.argv[1], ""))' "$1"; }

wait_field() { # wait_field BOX FIELD VALUE SECS: poll the mirror status until FIELD == VALUE
	local box=$1 f=$2 v=$3 secs=$4 end=$(($(date +%s) + $4)) got
	while (($(date +%s) < end)); do
		got=$(status_json "$box" | field "$f")
		[[ $got == "$v" ]] && return 0
		sleep 0.1
	done
	echo "box $box: mirror $f did not become $v within $secs s (last: $got)" >&2
	return 1
}

# CPU time (ms, all threads, user + system) a box has used so far
TICK_MS=$((1000 / $(getconf CLK_TCK)))
cpu_ms() {
	local pid=${PIDS[$1]:-} f
	[[ -n $pid && -r /proc/$pid/stat ]] || { echo 0; return; }
	# fields after the ")" that closes the command name: utime is the 12th, stime the 13th
	f=$(sed 's/.*) //' "/proc/$pid/stat")
	set -- $f
	echo $(((${12} + ${13}) * TICK_MS))
}
# context switches so far, all threads of a box (voluntary + not)
switches() {
	local pid=${PIDS[$1]:-}
	[[ -n $pid && -d /proc/$pid/task ]] || { echo 0; return; }
	cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'
}
declare -A CPU0=() SW0=()
perf() { # perf NAME PORT ARGS...: writes NAME.json and NAME.cpu (CPU ms per box during it)
	local name=$1 port=$2 b
	shift 2
	for b in "${!PIDS[@]}"; do
		CPU0[$b]=$(cpu_ms "$b")
		SW0[$b]=$(switches "$b")
	done
	local rec=
	if [[ -n ${EBOF_BENCH_PROFILE:-} && $name == "${EBOF_BENCH_PROFILE_RUN:-primary-w32}" ]]; then
		command perf record -q -g -o "$EBOF_BENCH_PROFILE" -p "${PIDS[${EBOF_BENCH_PROFILE_BOX:-primary}]}" >/dev/null 2>&1 &
		rec=$!
	fi
	if ! pin "$HOST_CORE" "$BIN" perf -a 127.0.0.1 -s "$port" -n "$NQN" --cores "$HOST_CORE" --json "$@" >"$WORK/$name.json"; then
		echo "ebof perf $name failed: $(head -c 2000 "$WORK/$name.json")" >&2
		tail -n 20 "$WORK"/*.log >&2
		exit 1
	fi
	if [[ -n $rec ]]; then
		kill -INT "$rec" 2>/dev/null || true
		wait "$rec" 2>/dev/null || true
	fi
	: >"$WORK/$name.cpu"
	for b in "${!PIDS[@]}"; do
		echo "$b $(($(cpu_ms "$b") - ${CPU0[$b]:-0})) $(($(switches "$b") - ${SW0[$b]:-0}))" >>"$WORK/$name.cpu"
	done
}
# box_cpu_us NAME BOX: the box's CPU µs per I/O during run NAME (ramp included in both the CPU
# time and the I/O count: the I/O count is IOPS × (ramp + runtime))
# (COLUMN 2: CPU µs per I/O; COLUMN 3: context switches per I/O)
box_cpu_us() {
	local v
	v=$(awk -v b="$2" -v c="${3:-2}" '$1 == b { print $c }' "$WORK/$1.cpu")
	python3 -c 'import sys; v, iops, secs, k = float(sys.argv[1] or 0), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]); print(f"{v * (1000 if k == 2 else 1) / (iops * secs):.2f}" if iops else "-")' \
		"$v" "$(j "$1" iops)" "$(python3 -c "print(${RUNTIME%s} + ${RAMP%s})")" "${3:-2}"
}
j() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); v=j
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$WORK/$1.json" "$2"; }

echo "== boxes: witness :$W_PORT, primary :$P_PORT (core $P_CORE), secondary :$S_PORT (core $S_CORE), unmirrored :$U_PORT"
box_config witness "$W_PORT" 1 $'\n[witness]\n'
box_config secondary "$S_PORT" 2001 "$(mirror_ns "$P_PORT" secondary)"
box_config primary "$P_PORT" 1001 "$(mirror_ns "$S_PORT" primary)"
box_config plain "$U_PORT" 3001 "$(printf '\n[[subsystems]]\nnqn = "%s"\nallow_any_host = true\n\n[[subsystems.namespaces]]\nnsid = 1\nbackend = "ram"\nsize = "%s"\n' "$NQN" "$RAM")"
start_box witness "$HOST_CORE" "$W_PORT"
start_box secondary "$S_CORE" "$S_PORT"
start_box primary "$P_CORE" "$P_PORT"
start_box plain "$P_CORE" "$U_PORT"
wait_field primary state in-sync 60
# A witness that has just started grants no lease for its lease_max_ms: fenced until then.
wait_field primary fenced False 60

echo "== 4K random write QD32 / read QD32 / write QD1, $RUNTIME (+$RAMP ramp) each"
for box in plain primary; do
	port=$U_PORT
	[[ $box == primary ]] && port=$P_PORT
	# every page of the RAM namespaces touched first (on both copies): a first write to a page
	# is a page fault, which would otherwise weigh on the slower (mirrored) runs only
	perf "$box-fill" "$port" --rw write --bs 128k --qd 32 --runtime "${EBOF_BENCH_FILL_TIME:-6s}"
	echo "$box: prefill wrote $(j "$box-fill" bytes) bytes over the $RAM namespace"
	perf "$box-w32" "$port" --rw randwrite --bs 4k --qd 32 --runtime "$RUNTIME" --ramp "$RAMP"
	perf "$box-r32" "$port" --rw randread --bs 4k --qd 32 --runtime "$RUNTIME" --ramp "$RAMP"
	perf "$box-w1" "$port" --rw randwrite --bs 4k --qd 1 --runtime "$RUNTIME" --ramp "$RAMP"
done
stop_box plain

echo "== resync: secondary stopped, $RESYNC written on the degraded primary, secondary restarted"
stop_box secondary
# sequential writes over the range, long enough to pass over all of it (perf runs for its
# runtime, wrapping around the range); what is dirty is read from the mirror's status
perf degraded "$P_PORT" --rw write --bs 128k --qd 32 --range "0-$RESYNC" --runtime "${EBOF_BENCH_DEGRADED_TIME:-4s}"
dirty_bytes=$(status_json primary | field resync_bytes_left)
t0=$(now_ms)
start_box secondary "$S_CORE" "$S_PORT"
# the copy starts once the link is up again (the state leaves `degraded`)
end=$(($(date +%s) + 60))
while [[ $(status_json primary | field state) == degraded ]] && (($(date +%s) < end)); do sleep 0.05; done
tr=$(now_ms)
wait_field primary state in-sync 600
t1=$(now_ms)

echo "== failover: kill -9 of the primary"
t2=$(now_ms)
stop_box primary KILL
wait_field secondary role primary 60
t3=$(now_ms)
perf after-failover "$S_PORT" --rw randwrite --bs 4k --qd 1 --runtime 1s
t4=$(now_ms)

echo
printf '%-28s %12s %12s %8s\n' "" unmirrored mirrored ratio
row() { # row LABEL KEY PLAIN MIRRORED
	local a b
	a=$(j "$3" "$2")
	b=$(j "$4" "$2")
	printf '%-28s %12.0f %12.0f %8.2f\n' "$1" "$a" "$b" "$(python3 -c "print($b/$a if $a else 0)")"
}
row "4K randwrite QD32 IOPS" iops plain-w32 primary-w32
row "4K randread QD32 IOPS" iops plain-r32 primary-r32
row "4K randwrite QD1 IOPS" iops plain-w1 primary-w1
row "4K write QD1 p50 latency us" latency_us.p50 plain-w1 primary-w1
echo
echo "target CPU µs per I/O (all threads, user + system; the boxes poll for --poll-us $POLL_US µs before sleeping):"
printf '%-28s %12s %12s %12s %12s\n' "" unmirrored primary secondary "prim+sec"
for run in w32 r32 w1; do
	u=$(box_cpu_us "plain-$run" plain)
	p=$(box_cpu_us "primary-$run" primary)
	s=$(box_cpu_us "primary-$run" secondary)
	printf '%-28s %12s %12s %12s %12s\n' "4K $run" "$u" "$p" "$s" "$(python3 -c "print(f'{$p + $s:.2f}')")"
done
echo "context switches per I/O (all threads):"
for run in w32 w1; do
	printf '%-28s %12s %12s %12s\n' "4K $run" "$(box_cpu_us "plain-$run" plain 3)" \
		"$(box_cpu_us "primary-$run" primary 3)" "$(box_cpu_us "primary-$run" secondary 3)"
done
plain_qd1=$(j plain-w1 latency_us.p50)
mirr_qd1=$(j primary-w1 latency_us.p50)
echo "QD1 goal: mirrored p50 $mirr_qd1 us <= unmirrored $plain_qd1 us + one round trip ($plain_qd1 us) + 10 % = $(python3 -c "print(round(($plain_qd1*2)*1.1,1))") us"
bytes=$dirty_bytes
echo "resync: $bytes bytes dirty, in sync again $((t1 - t0)) ms after the secondary started: $(python3 -c "print(round($bytes/max($((t1 - t0)),1)/1e6,2))") GB/s (includes the box's start)"
echo "resync: the copy itself (link up to in sync): $((t1 - tr)) ms: $(python3 -c "print(round($bytes/max($((t1 - tr)),1)/1e6,2))") GB/s (status polled every 50 ms)"
echo "failover: promoted $((t3 - t2)) ms after kill -9; first write on the new primary acknowledged $((t4 - t2)) ms after it"
echo "host: ebof perf pinned to core $HOST_CORE; primary core $P_CORE, secondary core $S_CORE; loopback TCP"
