#!/bin/bash
# Guest half of linux-rdma2.sh: two guests on a bridge, so RoCE v2 packets cross a (virtual) wire.
# ROLE=target (guest A, 10.77.0.2): soft-RoCE, then `ebof serve` with an RDMA listener when the
#   binary accepts one, else the kernel's nvmet-rdma (TARGET_KIND says which ran); tells the host
#   (guest_request target-ready KIND) and waits for /xchg/host-done, which the host writes when B
#   is through; then stops the target.
# ROLE=host (guest B, 10.77.0.3): soft-RoCE, waits for /xchg/target-ready (the host copies it from
#   A's request), then nvme discover / connect -t rdma to A, fio write+verify, disconnect, and tells
#   the host (guest_request host-done STATUS, also from its exit trap when a step failed). Once
#   `ebof discover --help` has -t/--transport, B also runs `ebof perf -t rdma --verify` against A.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"
# shellcheck source=guest-rdma.sh
source "$X/guest-rdma.sh"

ROLE=${ROLE:?ROLE=target or host}
TARGET_IP=${TARGET_IP:-10.77.0.2}
TARGET_PORT=${TARGET_PORT:-4420}
NQN=${RDMA2_NQN:-nqn.2026-11.io.ebof:rdma2}
SIZE_MIB=${RDMA2_MIB:-128}
FIO_SMALL=${FIO_SMALL:-8M}
FIO_SEQ=${FIO_SEQ:-16M}
PEER_WAIT=${PEER_WAIT:-240}
SERVE_CONF=/tmp/ebof-rdma2.toml
SERVE_LOG=$X/ebof-serve.log
TARGET_KIND=''
SENT=''

setup() {
	rdma_modules
	rxe_add
	run ip -br addr show
}

# --- guest A: the target
choose_target() {
	local rc=0
	if [[ ${RDMA2_TARGET:-auto} == kernel ]]; then
		TARGET_KIND=kernel && echo "RDMA2_TARGET=kernel: the kernel's nvmet-rdma" && return 0
	fi
	serve_rdma_conf "$SERVE_CONF" "$TARGET_IP" "$TARGET_PORT" "$NQN" "${SIZE_MIB}M"
	ebof_serve_rdma_check "$SERVE_CONF" || rc=$?
	case $rc in
	0) TARGET_KIND=ebof && echo "ebof serve accepts transport = \"rdma\": it is the target" ;;
	77) TARGET_KIND=kernel && echo "ebof serve has no RDMA yet: the kernel's nvmet-rdma is the target" ;;
	*) fail "ebof serve --print-config failed on the RDMA configuration" ;;
	esac
}
target_up() {
	if [[ $TARGET_KIND == ebof ]]; then
		serve_rdma_start "$SERVE_CONF" "$SERVE_LOG" "$TARGET_IP" "$TARGET_PORT"
	else
		run modprobe brd rd_nr=1 rd_size=$((SIZE_MIB * 1024))
		wait_for 10 test -b /dev/ram0 || fail "no /dev/ram0"
		kt_rdma_up "$NQN" "$TARGET_IP" "$TARGET_PORT" /dev/ram0
	fi
	echo "$TARGET_KIND" >"$X/target-kind"
}
announce() {
	SENT=1
	guest_request target-ready "$TARGET_KIND" 30
}
_host_done() { [[ -s $X/host-done ]]; }
wait_peer() {
	wait_for "$PEER_WAIT" _host_done || fail "guest B did not finish within $PEER_WAIT s"
	local st
	st=$(<"$X/host-done")
	echo "guest B finished with status $st"
	rxe_stats
	[[ $st == 0 ]] || fail "guest B failed (status $st)"
}
target_down() {
	if [[ $TARGET_KIND == ebof ]]; then
		serve_rdma_stop "$SERVE_LOG"
	else
		kt_rdma_down "$NQN"
	fi
	dmesg | grep -iE 'nvmet|rdma|rxe' | tail -n 20 || true
}

# --- guest B: the Linux host
_target_ready() { [[ -s $X/target-ready ]]; }
wait_target() {
	wait_for "$PEER_WAIT" _target_ready || fail "guest A announced no target within $PEER_WAIT s"
	TARGET_KIND=$(<"$X/target-ready")
	[[ $TARGET_KIND == ebof || $TARGET_KIND == kernel ]] || fail "guest A's target failed: $TARGET_KIND"
	echo "guest A serves $NQN with: $TARGET_KIND"
	run busybox ping -c 2 -W 5 "$TARGET_IP"
	run ip neigh show "$TARGET_IP"
}
b_discover() { rdma_discover "$NQN"; }
b_connect() { rdma_connect "$NQN"; }
b_fio_4k() { fio_verify b-rand4k "$NSDEV" "$FIO_SMALL" randwrite 4k 16; }
b_fio_128k() { fio_verify b-seq128k "$NSDEV" "$FIO_SEQ" write 128k 4; }
b_disconnect() {
	nvme_disconnect "$NQN"
	rxe_stats
}
# ebof's host across the wire too, once it has RDMA (skipped before: linux-rdma is the strict one)
b_ebof_perf() {
	if ! ebof_knows_rdma_host; then
		step_skip "'$EBOF discover --help' has no -t/--transport option"
		return 0
	fi
	ulimit -l unlimited
	run -t 90 "$EBOF" perf -t rdma -a "$TARGET_IP" -s "$TARGET_PORT" -n "$NQN" --rw randwrite --bs 4k \
		--qd 8 --runtime 5s --range 0-8M --verify
	rxe_stats
}

# the peer must not wait for nothing: report the status from the exit trap too
_exit_hook() {
	local rc=$?
	if [[ -z $SENT ]]; then
		SENT=1
		if [[ $ROLE == target ]]; then
			guest_request target-ready "failed($rc)" 30 || true
		else
			guest_request host-done "$rc" 30 || true
		fi
	fi
	_on_exit "$rc"
}
trap _exit_hook EXIT

if [[ $ROLE == target ]]; then
	step "A ($GUEST_IP): soft-RoCE (rdma_rxe on eth0), nvme-rdma, nvmet-rdma" setup
	step "A: ebof serve with an RDMA listener, else nvmet-rdma" choose_target
	step "A: target up on rdma $TARGET_IP:$TARGET_PORT" target_up
	step "A: tell B through the host (target-ready)" announce
	step "A: wait for B (host-done, $PEER_WAIT s at most)" wait_peer
	step "A: target stopped" target_down
else
	step "B ($GUEST_IP): soft-RoCE (rdma_rxe on eth0), nvme-rdma" setup
	step "B: wait for A's target (target-ready, $PEER_WAIT s at most)" wait_target
	step "B: nvme discover -t rdma $TARGET_IP" b_discover
	step "B: nvme connect -t rdma $TARGET_IP, nvme list" b_connect
	step "B: fio randwrite 4k QD16 $FIO_SMALL verify over the bridge" b_fio_4k
	step "B: fio write 128k QD4 $FIO_SEQ verify over the bridge" b_fio_128k
	step "B: nvme disconnect" b_disconnect
	step "B: ebof perf -t rdma randwrite 4k QD8 5s --verify over the bridge" b_ebof_perf
	SENT=1
	step "B: tell A through the host (host-done)" guest_request host-done 0 30
fi
