#!/bin/bash
# Scenario: NVMe over RDMA (RoCE v2, soft-RoCE) with both ends inside one guest (issue 13). The
# machine's kernel has no RDMA, so everything runs in the guest (linux-rdma.guest.sh): rdma_rxe on
# the guest's eth0, the kernel against the kernel (nvmet-rdma + nvme-rdma), ebof's host tools
# (`ebof discover/identify/perf -t rdma`) against nvmet-rdma, then `ebof serve` with an RDMA
# listener against the kernel host (nvme-cli, fio verify, ext4). The ebof steps are SKIPPED while
# the binary has no RDMA; with EBOF_INTEROP_STRICT=1 they are reported MISSING and the run fails at
# its end (after everything else ran). See guest-rdma.sh for the detection.
# One guest never puts RoCE on a wire (rxe loops to its own address): linux-rdma2.sh does.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-rdma.sh
# Environment:
#   EBOF_BIN               the binary (default <repo>/target/release/ebof), run inside the guest
#                          as /ebof/ebof (lib.sh copies it there)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 420)
#   EBOF_RDMA_FIO_SMALL / EBOF_RDMA_FIO_SEQ   fio sizes (default 8M for 4k random, 32M for 128k)
# Exit status: 0 passed, else failed.
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
# (EBOF_INTEROP_STRICT: vm_start stops the scenario before boot instead)
[[ -x $EBOF_BIN || -n ${EBOF_INTEROP_STRICT:-} ]] || warn "no ebof binary at $EBOF_BIN: the ebof steps will be skipped"

interop_init linux-rdma
vm_want_rdma
vm_setup
vm_env "EBOF_INTEROP_STRICT=${EBOF_INTEROP_STRICT:-}" "RUST_LOG=${RUST_LOG:-info}" \
	"FIO_SMALL=${EBOF_RDMA_FIO_SMALL:-8M}" "FIO_SEQ=${EBOF_RDMA_FIO_SEQ:-32M}" "FIO_TIMEOUT=120"
vm_run "$INTEROP_DIR/linux-rdma.guest.sh" "${EBOF_INTEROP_TIMEOUT:-420}"
rc=$?
if ((rc != 0)) && [[ -s $X/ebof-serve.log ]]; then
	echo "---- ebof serve (in the guest), last 40 lines ----"
	tail -n 40 "$X/ebof-serve.log"
fi
[[ -s $X/skipped.txt ]] && { echo "---- skipped steps ----"; cat "$X/skipped.txt"; }
[[ -s $X/missing.txt ]] && { echo "---- ebof steps missing (EBOF_INTEROP_STRICT) ----"; cat "$X/missing.txt"; }
echo
timing_summary
log "linux-rdma: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
