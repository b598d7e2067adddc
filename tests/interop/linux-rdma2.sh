#!/bin/bash
# Scenario: NVMe over RDMA between two guests on a bridge, so RoCE v2 (UDP 4791) packets cross a
# (virtual) wire, which one guest's rxe never does (it loops to its own address). In the run's
# netns, br0 joins tap0 and tap1; guest A (10.77.0.2, tap0) runs the target: `ebof serve` with an
# RDMA listener when the binary accepts one, else the kernel's nvmet-rdma; guest B (10.77.0.3,
# tap1) runs the Linux host: nvme discover/connect -t rdma to A, fio write+verify, disconnect.
# Both guests run linux-rdma2.guest.sh (ROLE=target / ROLE=host), concurrently, -smp 1 each. They
# meet through the host: A's guest_request target-ready is copied into B's exchange folder, B's
# host-done into A's. The host checks that B's tap carried at least the data fio moved, both ways.
#
# Usage (as root): tests/interop/linux-rdma2.sh
# Environment:
#   EBOF_BIN               the binary (default <repo>/target/release/ebof), run inside guest A
#                          as /ebof/ebof (lib.sh copies it there)
#   EBOF_RDMA2_TARGET      auto (default: ebof when it has RDMA, else the kernel) | kernel
#   EBOF_INTEROP_TIMEOUT   bound on each guest in seconds (default 300)
# Exit status: 0 passed, else failed.
# shellcheck disable=SC2317 # host_on_* are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
IP_A=10.77.0.2 IP_B=10.77.0.3
FIO_SMALL=${EBOF_RDMA_FIO_SMALL:-8M} FIO_SEQ=${EBOF_RDMA2_FIO_SEQ:-16M}
# fio writes FIO_SMALL + FIO_SEQ and reads them back: at least that much must cross tap1 each way
MIN_MIB=$((${FIO_SMALL%M} + ${FIO_SEQ%M}))
TAP_B0=() KIND=''

_tap_bytes() { ns_exec cat "/sys/class/net/$1/statistics/rx_bytes" "/sys/class/net/$1/statistics/tx_bytes" | tr '\n' ' '; }

# A's target is up: pass the word on to B, and note tap1's counters
host_on_target_ready() {
	KIND=$1
	log "guest A's target: $KIND"
	read -r -a TAP_B0 <<<"$(_tap_bytes tap1)"
	printf '%s\n' "$1" >"$XB/.target-ready" && mv "$XB/.target-ready" "$XB/target-ready"
}

# B is through (status $1): pass it on to A; the bytes B's tap carried since A was ready
host_on_host_done() {
	local now rx tx
	printf '%s\n' "$1" >"$XA/.host-done" && mv "$XA/.host-done" "$XA/host-done"
	((${#TAP_B0[@]} == 2)) || return 0
	read -r -a now <<<"$(_tap_bytes tap1)"
	rx=$(((now[0] - TAP_B0[0]) / 1048576)) tx=$(((now[1] - TAP_B0[1]) / 1048576))
	log "tap1 (guest B) since target-ready: $rx MiB from B, $tx MiB to B"
	printf '%s %s\n' "$rx" "$tx" >"$RUN_DIR/tap1-mib"
}

interop_init linux-rdma2
ns_bridge 2
XA=$X XB=$RUN_DIR/xchg-b
mkdir -p "$XB"
vm_want_rdma
vm_setup
vm_env "EBOF_INTEROP_STRICT=${EBOF_INTEROP_STRICT:-}" "RUST_LOG=${RUST_LOG:-info}" \
	"TARGET_IP=$IP_A" "RDMA2_TARGET=${EBOF_RDMA2_TARGET:-auto}" "FIO_SMALL=$FIO_SMALL" \
	"FIO_SEQ=$FIO_SEQ" "FIO_TIMEOUT=120" "PEER_WAIT=${EBOF_INTEROP_PEER_WAIT:-240}"
vm_timeout=${EBOF_INTEROP_TIMEOUT:-300}
vm_start a "$INTEROP_DIR/linux-rdma2.guest.sh" --xchg "$XA" --ip "$IP_A" --tap tap0 \
	--mac 52:54:00:77:00:02 --smp 1 --prefix ROLE=target
vm_start b "$INTEROP_DIR/linux-rdma2.guest.sh" --xchg "$XB" --ip "$IP_B" --tap tap1 \
	--mac 52:54:00:77:00:03 --smp 1 --prefix ROLE=host
vm_wait "$vm_timeout" a b
rc=$?
log "guest A: status ${VM_STATUS[a]}, guest B: status ${VM_STATUS[b]}; target: ${KIND:-none}"
if ((rc == 0)); then
	if [[ ! -s $RUN_DIR/tap1-mib ]]; then
		warn "no tap1 byte counts: B never reported"
		rc=1
	else
		read -r rx tx <"$RUN_DIR/tap1-mib"
		if ((rx < MIN_MIB || tx < MIN_MIB)); then
			warn "tap1 carried $rx MiB from B and $tx MiB to B; fio moved at least $MIN_MIB MiB each way"
			rc=1
		else
			log "RoCE crossed the bridge: tap1 carried $rx MiB from B and $tx MiB to B (fio: $MIN_MIB MiB each way)"
		fi
	fi
fi
if ((rc != 0)) && [[ -s $XA/ebof-serve.log ]]; then
	echo "---- ebof serve (guest A), last 40 lines ----"
	tail -n 40 "$XA/ebof-serve.log"
fi
echo
timing_summary
log "linux-rdma2 (target: ${KIND:-none}): $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
