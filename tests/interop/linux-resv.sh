#!/bin/bash
# Scenario: NVMe reservations (issue 9, item 2) as two Linux hosts see them. The guest connects to
# one subsystem twice, as two hosts (different --hostnqn and --hostid), with native multipath off
# (nvme_core multipath=N) so each connection has its own block device and every command goes out
# through the host that issued it. nvme resv-register / resv-acquire / resv-report / resv-release
# from both; the non-holder's write fails with Reservation Conflict; then Persist Through Power
# Loss: the host restarts `ebof serve` (guest_request restart) and the reservation is still there.
#
# Host side (this script, inside a fresh network namespace): `ebof serve` with one subsystem
#   nqn.2026-11.io.ebof:resv   16 MiB file namespace 1 ($RUN_DIR/disk.img; its reservation state,
#                              when PTPL is on, in $RUN_DIR/disk.img.resv beside it)
# listening on 10.77.0.1:4420. Guest side: linux-resv.guest.sh.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-resv.sh
# Environment:
#   EBOF_BIN               target binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 400)
#   RUST_LOG               passed to `ebof serve` (default info)
# Exit status: 0 passed, 77 skipped (no `ebof serve` and not EBOF_INTEROP_STRICT), else failed.
# shellcheck disable=SC2317 # start_target and host_on_restart are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
RESV_NQN=nqn.2026-11.io.ebof:resv
TARGET_PORT=4420
export RUST_LOG=${RUST_LOG:-info}

if [[ ! -x $EBOF_BIN ]] || ! "$EBOF_BIN" serve --help >/dev/null 2>&1; then
	msg="'$EBOF_BIN serve' is not available (build: cargo build --release -p ebof)"
	[[ -n ${EBOF_INTEROP_STRICT:-} ]] && die "$msg"
	log "SKIP linux-resv: $msg"
	exit 77
fi

write_config() {
	cat >"$RUN_DIR/ebof.toml" <<EOF2
# written by tests/interop/linux-resv.sh
[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT

[[subsystems]]
nqn = "$RESV_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "file"
path = "$RUN_DIR/disk.img"
size = "16M"
block_size = 512

[management]
enabled = false
EOF2
	echo "---- $RUN_DIR/ebof.toml ----"
	cat "$RUN_DIR/ebof.toml"
}

start_target() {
	bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --config "$RUN_DIR/ebof.toml"
	log "ebof serve started (pid $(bg_pid target))"
	wait_listen "$TARGET_PORT" 30 "$(bg_pid target)" || { bg_log_tail target; return 1; }
}

# guest_request restart: stop `ebof serve` (SIGTERM, SIGKILL after 5 s) and start it again with the
# same configuration; the state file is shown in restart.log on the way.
host_on_restart() {
	{
		echo "---- $RUN_DIR/disk.img.resv before the restart ----"
		cat "$RUN_DIR/disk.img.resv" 2>&1
	} >>"$RUN_DIR/restart.log"
	bg_stop target
	log "ebof serve stopped; starting it again"
	start_target
}

# ---------------------------------------------------------------------------------------------

interop_init linux-resv
vm_setup
vm_env "RESV_NQN=$RESV_NQN" "TARGET_PORT=$TARGET_PORT" "TARGET_IP=$HOST_IP" "NVME_CORE_ARGS=multipath=N"

write_config
host_step "start ebof serve" start_target || die "the target did not start"

vm_run "$INTEROP_DIR/linux-resv.guest.sh" "${EBOF_INTEROP_TIMEOUT:-400}"
rc=$?

if ! bg_alive target; then
	warn "ebof serve is not running any more"
	((rc == 0)) && rc=1
fi
[[ -s $RUN_DIR/restart.log ]] && cat "$RUN_DIR/restart.log"
# The restarted target said it restored the reservations from the state file.
if ((rc == 0)) && ! grep -q "reservations restored (PTPL)" "$RUN_DIR/target.log"; then
	warn "the restarted ebof serve did not log 'reservations restored (PTPL)'"
	rc=1
fi
((rc != 0)) && bg_log_tail target 60
echo
timing_summary
host_summary
log "linux-resv: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
