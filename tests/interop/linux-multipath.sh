#!/bin/bash
# Scenario: native NVMe multipath with ANA (issue 9). One subsystem on two listeners, the Linux host
# (nvme_core.multipath=Y) connects to both and merges them into one head device; fio with crc32c
# verify runs while one path is switched to inaccessible and back (ebof ctl ana set) and then its
# listener is removed with its controllers (ebof ctl listener remove --disconnect): no I/O error,
# no verify failure, and the ANA states show in `nvme ana-log` and sysfs.
#
# Host side (this script, inside a fresh network namespace): `ebof serve` with one subsystem
#   nqn.2026-11.io.ebof:mpath   64 MiB RAM namespace 1, 512-byte blocks, ANA group 1
# listening on 10.77.0.1:4420 and 10.77.0.1:4421, any host allowed, management API on a Unix
# socket in the run dir (the guest asks the host to run `ebof ctl`: guest_request ctl "ARGS").
# Guest side: linux-multipath.guest.sh.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-multipath.sh
# Environment:
#   EBOF_BIN               target binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 300)
#   RUST_LOG               passed to `ebof serve` (default info)
# Exit status: 0 passed, 77 skipped (no `ebof serve`/`ctl` and not EBOF_INTEROP_STRICT), else failed.
# shellcheck disable=SC2317 # start_target is called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
MP_NQN=nqn.2026-11.io.ebof:mpath
PORT_A=4420
PORT_B=4421
export RUST_LOG=${RUST_LOG:-info}

need_ebof linux-multipath serve ctl

write_config() {
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-multipath.sh
[[listeners]]
address = "$HOST_IP"
port = $PORT_A

[[listeners]]
address = "$HOST_IP"
port = $PORT_B

[[subsystems]]
nqn = "$MP_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "64M"
block_size = 512
ana_group = 1
EOF
	echo "---- $RUN_DIR/ebof.toml ----"
	cat "$RUN_DIR/ebof.toml"
}

start_target() { serve_with_mgmt "$RUN_DIR/ebof.toml" "$PORT_A" "$PORT_B"; }

# ---------------------------------------------------------------------------------------------

interop_init linux-multipath
vm_setup
vm_env "MP_NQN=$MP_NQN" "PORT_A=$PORT_A" "PORT_B=$PORT_B" "TARGET_IP=$HOST_IP"

write_config
host_step "start ebof serve on two listeners" start_target || die "the target did not start"
for p in "$PORT_A" "$PORT_B"; do
	host_step "raw ICReq/ICResp on $HOST_IP:$p" raw_icreq_check "$HOST_IP" "$p" ||
		{ bg_log_tail target; die "the target does not answer an ICReq on $p"; }
done

vm_run "$INTEROP_DIR/linux-multipath.guest.sh" "${EBOF_INTEROP_TIMEOUT:-300}"
rc=$?
serve_check_after "$rc" || rc=$?
echo
timing_summary
host_summary
log "linux-multipath: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
