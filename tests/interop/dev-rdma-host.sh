#!/bin/bash
# Private development helper (not registered in run-all.sh): ebof's host tools over NVMe/RDMA
# against the guest kernel's nvmet-rdma, both RDMA ends inside one guest (soft-RoCE on the
# guest's virtio-net; the machine's own kernel has no RDMA). The registered scenarios are
# linux-rdma*.sh.
#
# Usage (as root): tests/interop/dev-rdma-host.sh
#   EBOF_BIN   the ebof to test (default <repo>/target/debug/ebof; built with the rdma feature)
#   VM_FLAVOUR=trixie  Linux 6.12, whose nvmet has DH-HMAC-CHAP (the DH-HMAC-CHAP step runs
#              only there); the trixie root then gets the soft-RoCE user space added
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/debug/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
[[ -x $EBOF_BIN ]] || die "no ebof binary at $EBOF_BIN"

if [[ ${VM_FLAVOUR:-bookworm} == trixie ]]; then
	# the rxe verbs provider, ibv_devices; rdma (iproute2) and nvme-cli are in the root already
	export EBOF_VM_TRIXIE_EXTRA="${EBOF_VM_TRIXIE_EXTRA:-} ibverbs-providers ibverbs-utils rdma-core"
fi
interop_init dev-rdma-host
vm_setup
vm_run "$INTEROP_DIR/dev-rdma-host.guest.sh" "${EBOF_INTEROP_TIMEOUT:-900}"
rc=$?
echo
timing_summary
log "dev-rdma-host: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
