#!/usr/bin/env bash
# Soak test (not in CI): run `ebof serve` with a RAM and a file namespace on 127.0.0.1, drive it
# with `ebof perf --verify` workloads and a connection churn loop (identify/discover: connect,
# admin commands, disconnect) for DURATION, sample the server's RSS, open fds and threads, and
# report start/end/max and drift of each.
#
#   scripts/soak.sh DURATION            e.g. 180, 90s, 10m, 2h
#
# Exit status: 0 if every verify run passed and the server stayed up; 1 otherwise (and, with
# SOAK_STRICT=1, if fds or threads did not come back to their start values once the load
# stopped). Environment:
#   EBOF_BIN           the ebof binary (default: target/release/ebof, built if missing)
#   SOAK_SAMPLE_SECS   sampling period (default 5)
#   SOAK_SERVE_ARGS    extra `ebof serve` arguments (e.g. "--cores 0 --poll-us 0")
#   SOAK_KEEP=1        keep the work directory (config, logs, samples)
# Everything it starts is stopped by PID on exit; traffic stays on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 DURATION   (seconds, or with s/m/h: 90s, 10m, 2h)" >&2; exit 2; }
[ $# -eq 1 ] || usage
case "$1" in
    *h) secs=$(( ${1%h} * 3600 )) ;;
    *m) secs=$(( ${1%m} * 60 )) ;;
    *s) secs=${1%s} ;;
    *) secs=$1 ;;
esac
[[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -ge 10 ] || { echo "DURATION must be at least 10 s" >&2; usage; }
sample_secs=${SOAK_SAMPLE_SECS:-5}

if [ -z "${EBOF_BIN:-}" ]; then
    EBOF_BIN="$PWD/target/release/ebof"
    [ -x "$EBOF_BIN" ] || cargo build --release --locked -p ebof
fi
[ -x "$EBOF_BIN" ] || { echo "no ebof binary at $EBOF_BIN" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ebof-soak.XXXXXX")
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        # The loops' current ebof client first (children of that loop, by parent PID).
        pkill -P "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ "${SOAK_KEEP:-0}" = 1 ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free loopback port: bind port 0 and read what the kernel chose.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $(( 20000 + RANDOM % 20000 ))
}
port=$(free_port)
nqn="nqn.2026-11.io.ebof:soak"
cat > "$work/ebof.toml" <<EOF
[[listeners]]
address = "127.0.0.1"
port = $port

[[subsystems]]
nqn = "$nqn"

[[subsystems.namespaces]]
backend = "ram"
size = "64M"

[[subsystems.namespaces]]
backend = "file"
path = "$work/ns2.img"
size = "64M"
EOF

# shellcheck disable=SC2086 # SOAK_SERVE_ARGS is a list of arguments
"$EBOF_BIN" serve --config "$work/ebof.toml" ${SOAK_SERVE_ARGS:-} > "$work/serve.log" 2>&1 &
server=$!
pids+=("$server")
host=(--traddr 127.0.0.1 --trsvcid "$port" --nqn "$nqn")
for _ in $(seq 100); do
    "$EBOF_BIN" identify "${host[@]}" > /dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { echo "ebof serve exited:" >&2; cat "$work/serve.log" >&2; exit 1; }
    sleep 0.2
done
"$EBOF_BIN" identify "${host[@]}" > /dev/null || { echo "ebof serve does not answer on 127.0.0.1:$port" >&2; exit 1; }

# One sample: epoch seconds, RSS (KiB), open fds, threads.
sample() {
    local rss fds thr
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$server/status" 2>/dev/null) || return 1
    fds=$(find "/proc/$server/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    thr=$(find "/proc/$server/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    [ -n "$rss" ] || return 1
    echo "$(date +%s) $rss $fds $thr"
}
sample > "$work/start"
read -r s_t s_rss s_fds s_thr < "$work/start"
echo "soak: ebof serve (pid $server) on 127.0.0.1:$port, ${secs} s; start: RSS ${s_rss} KiB, ${s_fds} fds, ${s_thr} threads"

deadline=$(( $(date +%s) + secs ))

# Connection churn: connect, Identify (every namespace), disconnect; now and then a discovery.
(
    n=0 fail=0
    while [ "$(date +%s)" -lt "$deadline" ]; do
        n=$((n + 1))
        if (( n % 5 == 0 )); then
            "$EBOF_BIN" discover --traddr 127.0.0.1 --trsvcid "$port" > /dev/null 2>&1 || fail=$((fail + 1))
        else
            "$EBOF_BIN" identify "${host[@]}" > /dev/null 2>&1 || fail=$((fail + 1))
        fi
        sleep 0.1
    done
    echo "$n $fail" > "$work/churn"
) &
pids+=($!)

# Verify workloads, one after the other, cycling through shapes (namespace, pattern, block
# size, digests, SQ flow control).
(
    shapes=(
        "--nsid 1 --rw randrw --bs 4k --qd 16 --queues 2"
        "--nsid 2 --rw randwrite --bs 16k --qd 8 --queues 2"
        "--nsid 1 --rw read --bs 128k --qd 4 --dissqfc"
        "--nsid 2 --rw randread --bs 4k --qd 32 --hdr-digest --data-digest"
        "--nsid 1 --rw write --bs 64k --qd 8 --queues 3 --no-busy-poll"
    )
    runs=0 failed=0 i=0
    while :; do
        left=$(( deadline - $(date +%s) ))
        [ "$left" -ge 3 ] || break
        run=$(( left < 15 ? left - 1 : 15 ))
        shape=${shapes[$(( i % ${#shapes[@]} ))]}
        i=$((i + 1))
        runs=$((runs + 1))
        # shellcheck disable=SC2086 # $shape is a list of arguments
        if ! "$EBOF_BIN" perf "${host[@]}" $shape --verify --runtime "${run}s" --json \
                > "$work/perf-$runs.json" 2> "$work/perf-$runs.err"; then
            failed=$((failed + 1))
            echo "soak: perf run $runs FAILED ($shape):" >&2
            tail -n 5 "$work/perf-$runs.err" >&2
        fi
        [ "$runs" -eq 1 ] && sample > "$work/warm"
    done
    echo "$runs $failed" > "$work/perf"
) &
perf_loop=$!
pids+=("$perf_loop")

# Sample until the deadline (and the perf loop has finished its last run).
: > "$work/samples"
while kill -0 "$perf_loop" 2>/dev/null; do
    if ! s=$(sample); then
        echo "soak: ebof serve is gone" >&2
        break
    fi
    echo "$s" >> "$work/samples"
    read -r t rss fds thr <<< "$s"
    printf 'soak: +%4ss RSS %7s KiB  fds %4s  threads %3s\n' "$(( t - s_t ))" "$rss" "$fds" "$thr"
    sleep "$sample_secs"
done
wait "$perf_loop" 2>/dev/null || true
for p in "${pids[@]:1}"; do wait "$p" 2>/dev/null || true; done

status=0
if ! kill -0 "$server" 2>/dev/null; then
    echo "soak: FAILED: ebof serve exited during the run; its log:" >&2
    tail -n 20 "$work/serve.log" >&2
    exit 1
fi
# Let closed connections and idle worker threads (they exit after 10 s idle) wind down, then
# take the end sample.
sleep 12
sample > "$work/end"
read -r _ e_rss e_fds e_thr < "$work/end"
read -r _ w_rss _ _ < "$work/warm" 2>/dev/null || w_rss=$s_rss
max() { awk -v c="$1" 'BEGIN { m = 0 } { if ($c > m) m = $c } END { print m }' "$work/samples" "$work/end"; }
read -r runs failed < "$work/perf" 2>/dev/null || { runs=0; failed=0; }
read -r churn churn_fail < "$work/churn" 2>/dev/null || { churn=0; churn_fail=0; }

echo
echo "soak summary (${secs} s; ebof serve pid $server)"
printf '  %-8s %10s %10s %10s %10s\n' "" start end max drift
printf '  %-8s %10s %10s %10s %+10d   (KiB; after the first verify run: %s, drift since %+d)\n' \
    RSS "$s_rss" "$e_rss" "$(max 2)" $(( e_rss - s_rss )) "$w_rss" $(( e_rss - w_rss ))
printf '  %-8s %10s %10s %10s %+10d\n' fds "$s_fds" "$e_fds" "$(max 3)" $(( e_fds - s_fds ))
printf '  %-8s %10s %10s %10s %+10d\n' threads "$s_thr" "$e_thr" "$(max 4)" $(( e_thr - s_thr ))
echo "  perf --verify runs: $runs, failed: $failed"
echo "  churn connections (identify/discover): $churn, failed: $churn_fail"
echo "  (RSS grows with the data written into the 64 MiB RAM namespace until it is all touched)"

if [ "$failed" -ne 0 ] || [ "$runs" -eq 0 ]; then
    echo "soak: FAILED: verify runs failed (or none ran)" >&2
    status=1
fi
if [ "$churn_fail" -ne 0 ]; then
    echo "soak: FAILED: $churn_fail churn connections failed" >&2
    status=1
fi
if [ "$e_fds" -ne "$s_fds" ] || [ "$e_thr" -ne "$s_thr" ]; then
    echo "soak: note: fds or threads did not return to their start values after the load stopped"
    [ "${SOAK_STRICT:-0}" = 1 ] && status=1
fi
[ "$status" -eq 0 ] && echo "soak: passed"
exit "$status"
