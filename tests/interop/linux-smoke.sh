#!/bin/bash
# Scenario: the smallest one that runs the binary under test inside the guest. `ebof serve` (one
# 16 MiB RAM namespace) runs on the host side; in the guest, /ebof/ebof (lib.sh's copy of
# $EBOF_BIN) must run and, as the userspace host, discover and identify that subsystem over the
# guest's network. tmp-checkout.sh runs it from a checkout under /tmp, in both guest flavours, to
# prove that the guest reaches the binary wherever the checkout lives. ~25 s.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-smoke.sh            (EBOF_VM_FLAVOUR=trixie: in the trixie guest)
# Environment:
#   EBOF_BIN               the binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 240)
# Exit status: 0 passed, 77 skipped (no `ebof serve`/`discover`/`identify` and not
# EBOF_INTEROP_STRICT), else failed.
# shellcheck disable=SC2317 # start_target is called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
SMOKE_NQN=nqn.2026-11.io.ebof:smoke
TARGET_PORT=4420
export RUST_LOG=${RUST_LOG:-info}

need_ebof linux-smoke serve discover identify

start_target() {
	bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --listen "$HOST_IP:$TARGET_PORT" --ram 16M \
		--nqn "$SMOKE_NQN"
	log "ebof serve started (pid $(bg_pid target))"
	wait_listen "$TARGET_PORT" 30 "$(bg_pid target)" || { bg_log_tail target; return 1; }
}

interop_init "linux-smoke-$VM_FLAVOUR"
vm_setup
vm_env "SMOKE_NQN=$SMOKE_NQN" "TARGET_PORT=$TARGET_PORT" "TARGET_IP=$HOST_IP"
log "checkout $REPO_ROOT, binary $EBOF_BIN, guest flavour $VM_FLAVOUR"

host_step "start ebof serve" start_target || die "the target did not start"
vm_run "$INTEROP_DIR/linux-smoke.guest.sh" "${EBOF_INTEROP_TIMEOUT:-240}"
rc=$?
serve_check_after "$rc" || rc=$?
echo
timing_summary
host_summary
log "linux-smoke ($VM_FLAVOUR): $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
