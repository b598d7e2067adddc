#!/bin/bash
# Scenario (issue 34 "Tests"): replicated volumes as the stock Linux 6.12 host sees them
# (trixie guest, native multipath). Guest side: linux-mirror.guest.sh.
#
# Host side (this file): three `ebof serve` in the run's network namespace, each its own
# management socket and state directory in the run dir:
#   box A 10.77.0.21:4420  nqn.2026-11.io.ebof:mirror nsid 1 (64 MiB file), mirror primary,
#                          peer B, CNTLIDs 1-999
#   box B 10.77.0.22:4420  the same NQN/NSID (its own file), mirror secondary, peer A,
#                          CNTLIDs 1000-1999
#   witness 10.77.0.23:4420  `[witness]`, no subsystems
# both replica boxes with `[mirror] witness = "10.77.0.23:4420"` and `lease_ms = 4000`
# (configuration format: /work/notes/mirror-design.md, issue 34). The guest drives the failures
# through guest_request mirror "ACTION BOX" (host_on_mirror): kill (SIGKILL), stop (SIGSTOP),
# cont (SIGCONT), restart (the same configuration: the box comes back as secondary from its
# persisted state), status (`ebof ctl ns mirror status NQN 1 --json` into /xchg/mirror-status.json),
# ctl (any `ebof ctl` ARGS on that box: "ctl A ARGS...").
#
# Two ways to run it:
#   * alone, in its own trixie boot: tests/interop/linux-mirror.sh (not in run-all's list: the
#     test command runs it inside linux-security's boot, below);
#   * in the boot of another trixie scenario: that scenario sources this file, calls
#     `mirror_attach` before vm_run (starts the boxes, copies the guest part into the exchange
#     folder, adds MIRROR=1 to the guest's environment) and `mirror_detach RC` after; its guest
#     script ends with `[[ ${MIRROR:-} == 1 ]] && source "$X/mirror.guest.sh" && mirror_steps`.
#     linux-security does so unless EBOF_INTEROP_MIRROR=0.
# While `ebof serve --print-config` rejects the configuration (no mirror in this binary yet), the
# boxes are not started and every mirror step SKIPs with the reason (EBOF_INTEROP_STRICT=1: the
# scenario fails).
#
# Environment: EBOF_BIN, EBOF_INTEROP_TIMEOUT (default 900), EBOF_INTEROP_STRICT, RUST_LOG,
#   EBOF_MIRROR_SIZE (default 64M), EBOF_MIRROR_FAILOVER_SECS (bound on each failover seen by
#   the host, default 30).
# shellcheck disable=SC2317 # host_on_* and the functions are called indirectly

MIRROR_NQN=nqn.2026-11.io.ebof:mirror
MIRROR_PORT=4420
declare -A MIRROR_IP=([A]=10.77.0.21 [B]=10.77.0.22 [W]=10.77.0.23)
MIRROR_SKIP=''

# mirror_config BOX: the configuration of replica box A or B, or of the witness W
mirror_config() {
	local box=$1 peer role lo hi
	if [[ $box == W ]]; then
		cat <<EOF
# written by tests/interop/linux-mirror.sh: the witness (no subsystems)
[[listeners]]
address = "${MIRROR_IP[W]}"
port = $MIRROR_PORT

[witness]
lease_max_ms = 8000
EOF
		return 0
	fi
	if [[ $box == A ]]; then peer=B role=primary lo=1 hi=999; else peer=A role=secondary lo=1000 hi=1999; fi
	cat <<EOF
# written by tests/interop/linux-mirror.sh: replica box $box ($role on first start)
[[listeners]]
address = "${MIRROR_IP[$box]}"
port = $MIRROR_PORT

[target]
cntlid_min = $lo
cntlid_max = $hi
state_dir = "$RUN_DIR/mirror-$box-state"

[mirror]
witness = "${MIRROR_IP[W]}:$MIRROR_PORT"
lease_ms = 4000

[[subsystems]]
nqn = "$MIRROR_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "file"
path = "$RUN_DIR/mirror-$box.img"
size = "${EBOF_MIRROR_SIZE:-64M}"
ana_group = 2
mirror = { peer = "${MIRROR_IP[$peer]}:$MIRROR_PORT", role = "$role" }
EOF
}

# _mirror_rejected FILE: why `ebof serve --print-config` refuses FILE (empty when it accepts it)
_mirror_rejected() {
	local out
	out=$("$EBOF_BIN" serve --config "$1" --print-config 2>&1 >/dev/null) && return 0
	out=$(tail -n 1 <<<"${out:-ebof serve --print-config failed}")
	echo "ebof serve rejects $(basename "$1"): ${out%%, expected one of*}"
}

# _mirror_serve BOX: `ebof serve` for BOX in the netns (background process mirror-BOX); waits until
# it listens and its management socket exists
_mirror_serve() {
	local box=$1 name=mirror-$1 i sock=$RUN_DIR/mirror-$1.sock
	mkdir -p "$RUN_DIR/mirror-$box-state"
	bg_start "$name" ip netns exec "$NS" "$EBOF_BIN" serve --config "$RUN_DIR/mirror-$box.toml" \
		--mgmt-socket "$sock" --poll-us 0
	for ((i = 0; i < 150; i++)); do
		if ! bg_alive "$name"; then
			bg_log_tail "$name" 20
			warn "$name: ebof serve exited"
			return 1
		fi
		if [[ -S $sock && -n $(ns_exec ss -Hltn "src ${MIRROR_IP[$box]}:$MIRROR_PORT") ]]; then
			log "$name: ebof serve on ${MIRROR_IP[$box]} (pid $(bg_pid "$name"))"
			return 0
		fi
		sleep 0.2
	done
	warn "$name: ebof serve does not listen on ${MIRROR_IP[$box]} after 30 s"
	bg_log_tail "$name" 20
	return 1
}

# mirror_start: the addresses, the three configurations, then the witness, A and B (or
# MIRROR_SKIP set to the reason when this ebof rejects a configuration)
mirror_start() {
	local box ip
	for box in W A B; do
		mirror_config "$box" >"$RUN_DIR/mirror-$box.toml"
		echo "---- $RUN_DIR/mirror-$box.toml ----"
		cat "$RUN_DIR/mirror-$box.toml"
		MIRROR_SKIP=$(_mirror_rejected "$RUN_DIR/mirror-$box.toml")
		if [[ -n $MIRROR_SKIP ]]; then
			log "no replicated volumes in this ebof: $MIRROR_SKIP"
			return 0
		fi
	done
	for ip in "${MIRROR_IP[@]}"; do
		ip -n "$NS" addr add "$ip/24" dev tap0 || return 1
	done
	for box in W A B; do _mirror_serve "$box" || return 1; done
}

# _mirror_ctl BOX ARGS...: `ebof ctl` on BOX's socket; stdout -> /xchg/ctl.out, stderr ->
# /xchg/ctl.err, both in $RUN_DIR/ctl.log
_mirror_ctl() {
	local box=$1 rc
	shift
	echo "+ [$box] ebof ctl $*" >>"$RUN_DIR/ctl.log"
	timeout -k 5 30 "$EBOF_BIN" ctl --socket "$RUN_DIR/mirror-$box.sock" "$@" >"$X/.ctl.out" 2>"$X/.ctl.err"
	rc=$?
	cat "$X/.ctl.out" "$X/.ctl.err" >>"$RUN_DIR/ctl.log"
	echo "status $rc" >>"$RUN_DIR/ctl.log"
	mv "$X/.ctl.out" "$X/ctl.out" && mv "$X/.ctl.err" "$X/ctl.err"
	return "$rc"
}

# guest_request mirror "ACTION BOX [ARGS]": see the header. Each action is logged with the time,
# so the failover figures can be read against the boxes' logs.
host_on_mirror() {
	local action box args pid
	read -r action box _ <<<"$1"
	read -r -a args <<<"${1#"$action" "$box"}"
	[[ -n $MIRROR_SKIP ]] && { echo "$MIRROR_SKIP" >"$X/ctl.err"; return 77; }
	[[ $box == [ABW] ]] || { warn "mirror: no box '$box'"; return 2; }
	pid=$(bg_pid "mirror-$box")
	log "mirror: $action $box${pid:+ (pid $pid)}"
	case $action in
	kill) [[ -n $pid ]] && kill -KILL "$pid" && wait "$pid" 2>/dev/null; unset "BG_PIDS[mirror-$box]"; return 0 ;;
	stop) [[ -n $pid ]] && kill -STOP "$pid" ;;
	cont) [[ -n $pid ]] && kill -CONT "$pid" ;;
	restart)
		if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
			warn "mirror: $box is still running (pid $pid)"
			return 1
		fi
		_mirror_serve "$box"
		;;
	status) _mirror_ctl "$box" --json ns mirror status "$MIRROR_NQN" 1 && cp "$X/ctl.out" "$X/mirror-status.json" ;;
	ctl) _mirror_ctl "$box" "${args[@]}" ;;
	*) warn "mirror: unknown action '$action'"; return 2 ;;
	esac
}

# mirror_attach: before vm_run of the scenario whose boot the mirror steps share
mirror_attach() {
	host_step "replicated volumes: witness and two replica boxes" mirror_start || MIRROR_SKIP="the boxes did not start"
	cp "$INTEROP_DIR/linux-mirror.guest.sh" "$X/mirror.guest.sh"
	vm_env "MIRROR=1" "MIRROR_NQN=$MIRROR_NQN" "MIRROR_PORT=$MIRROR_PORT" "MIRROR_IP_A=${MIRROR_IP[A]}" \
		"MIRROR_IP_B=${MIRROR_IP[B]}" "MIRROR_SKIP=$MIRROR_SKIP" \
		"MIRROR_FAILOVER_SECS=${EBOF_MIRROR_FAILOVER_SECS:-30}"
}

# mirror_detach RC: after vm_run; the boxes that should run still run, none panicked; stops them.
# Prints the failover figures the guest measured. Returns the (possibly worsened) status.
mirror_detach() {
	local rc=$1 box
	for box in A B W; do
		[[ -n $(bg_pid "mirror-$box") ]] || continue
		if ! bg_alive "mirror-$box"; then
			warn "mirror-$box is not running any more"
			((rc == 0)) && rc=1
		fi
		if grep -q 'panicked' "$RUN_DIR/mirror-$box.log" 2>/dev/null; then
			warn "mirror-$box panicked"
			((rc == 0)) && rc=1
		fi
		((rc != 0)) && bg_log_tail "mirror-$box" 40
	done
	for box in B A W; do bg_stop "mirror-$box"; done
	if [[ -s $X/mirror-figures.tsv ]]; then
		echo "---- replicated volumes: what the host saw (seconds) ----"
		awk -F'\t' '{ printf "  %-64s %8s\n", $1, $2 }' "$X/mirror-figures.tsv"
	fi
	return "$rc"
}

# ---------------------------------------------------------------------------------------------
# alone: its own trixie boot

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -uo pipefail
	# shellcheck source=lib.sh
	source "$(dirname "$0")/lib.sh"
	VM_FLAVOUR=trixie
	EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
	[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
	export RUST_LOG=${RUST_LOG:-info}
	need_ebof linux-mirror serve ctl
	interop_init linux-mirror
	vm_setup
	mirror_attach
	vm_run "$INTEROP_DIR/linux-mirror.guest.sh" "${EBOF_INTEROP_TIMEOUT:-900}"
	rc=$?
	mirror_detach "$rc" || rc=$?
	((rc == 0 && HOST_FAILED > 0)) && rc=1
	if [[ -s $X/skipped.txt ]]; then
		echo "---- guest steps SKIPPED ----"
		cat "$X/skipped.txt"
		[[ -n ${EBOF_INTEROP_STRICT:-} && $EBOF_INTEROP_STRICT != 0 ]] && ((rc == 0)) && rc=1
	fi
	echo
	timing_summary
	host_summary
	log "linux-mirror: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
	exit "$rc"
fi
