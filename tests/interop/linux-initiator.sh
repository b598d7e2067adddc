#!/bin/bash
# Scenario: the stock Linux NVMe/TCP initiator uses our target end to end.
#
# Host side (this script, inside a fresh network namespace): `ebof serve` with two subsystems
#   nqn.2026-11.io.ebof:ram   512 MiB RAM namespace, 512-byte blocks
#   nqn.2026-11.io.ebof:file  256 MiB file-backed namespace, 4096-byte blocks
# listening on 10.77.0.1:4420 (+ discovery on 10.77.0.1:8009), any host allowed.
# Guest side (linux-initiator.guest.sh, a QEMU guest running Debian's kernel): nvme discover/connect,
# the admin surface, nvme compare/copy/verify, fio write+verify, blkdiscard, ext4, digests, queue
# count/size, and persistence of the file namespace across a target restart (the guest asks the host
# to restart the target).
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-initiator.sh
# Environment:
#   EBOF_BIN               target binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TARGET    ebof (default) | kernel: reference run against the guest kernel's own nvmet
#                          with the same subsystems (checks the scenario itself, no ebof needed)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 1080)
#   RUST_LOG               passed to `ebof serve` (default info)
# Exit status: 0 passed, 77 skipped (no `ebof serve` yet and not EBOF_INTEROP_STRICT), else failed.
# shellcheck disable=SC2317 # start_target etc. are called indirectly (host_step, host_on_*)
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
MODE=${EBOF_INTEROP_TARGET:-ebof}
RAM_NQN=nqn.2026-11.io.ebof:ram
FILE_NQN=nqn.2026-11.io.ebof:file
TARGET_PORT=4420
DISC_PORT=8009
export RUST_LOG=${RUST_LOG:-info}

case $MODE in
ebof)
	if [[ ! -x $EBOF_BIN ]] || ! "$EBOF_BIN" serve --help >/dev/null 2>&1; then
		msg="'$EBOF_BIN serve' is not available (build: cargo build --release -p ebof)"
		[[ -n ${EBOF_INTEROP_STRICT:-} ]] && die "$msg"
		log "SKIP linux-initiator: $msg"
		exit 77
	fi
	;;
kernel) ;;
*) die "EBOF_INTEROP_TARGET must be ebof or kernel, not '$MODE'" ;;
esac

# ---------------------------------------------------------------------------------------------
# our target

write_config() {
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-initiator.sh
[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT

[discovery]
address = "$HOST_IP"
port = $DISC_PORT

[[subsystems]]
nqn = "$RAM_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "512M"
block_size = 512

[[subsystems]]
nqn = "$FILE_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "file"
path = "$RUN_DIR/ns-file.img"
size = "256M"
block_size = 4096
EOF
	echo "---- $RUN_DIR/ebof.toml ----"
	cat "$RUN_DIR/ebof.toml"
}

# the target's stderr goes to $RUN_DIR/target.log (appended across restarts)
start_target() {
	echo "---- $(date +%T) starting: $EBOF_BIN serve --config $RUN_DIR/ebof.toml" >>"$RUN_DIR/target.log"
	bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --config "$RUN_DIR/ebof.toml"
	log "ebof serve started (pid $(bg_pid target))"
	if ! wait_listen "$TARGET_PORT" 30 "$(bg_pid target)" || ! wait_listen "$DISC_PORT" 30 "$(bg_pid target)"; then
		bg_log_tail target
		return 1
	fi
}

stop_target() {
	log "stopping ebof serve (pid $(bg_pid target))"
	bg_stop target
}

# guest_request restart-target: the file namespace must keep its data across this
host_on_restart_target() {
	stop_target
	start_target
}

# ---------------------------------------------------------------------------------------------

interop_init linux-initiator
vm_setup
vm_env "RAM_NQN=$RAM_NQN" "FILE_NQN=$FILE_NQN" "TARGET_PORT=$TARGET_PORT" "DISC_PORT=$DISC_PORT" \
	"TARGET_MODE=$MODE"

if [[ $MODE == ebof ]]; then
	write_config
	host_step "start ebof serve" start_target || die "the target did not start"
	host_step "raw ICReq/ICResp on $HOST_IP:$TARGET_PORT" raw_icreq_check "$HOST_IP" "$TARGET_PORT" ||
		{ bg_log_tail target; die "the target does not answer an ICReq on $TARGET_PORT"; }
	host_step "raw ICReq/ICResp on $HOST_IP:$DISC_PORT" raw_icreq_check "$HOST_IP" "$DISC_PORT" ||
		{ bg_log_tail target; die "the target does not answer an ICReq on $DISC_PORT"; }
	vm_env "TARGET_IP=$HOST_IP"
else
	log "reference run: the guest kernel's nvmet serves the subsystems on $GUEST_IP"
	vm_env "TARGET_IP=$GUEST_IP"
	: "${EBOF_VM_MEM:=3072}" # brd 512 MiB + file namespace on tmpfs 256 MiB
fi

vm_run "$INTEROP_DIR/linux-initiator.guest.sh" "${EBOF_INTEROP_TIMEOUT:-1080}"
rc=$?

if [[ $MODE == ebof ]]; then
	if ! bg_alive target; then
		warn "ebof serve is not running any more"
		((rc == 0)) && rc=1
	fi
	((rc != 0)) && bg_log_tail target 60
fi
echo
timing_summary
host_summary
log "linux-initiator ($MODE): $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
