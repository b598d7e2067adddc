#!/bin/bash
# Run every kernel interop scenario: vm_setup once, then each scenario in its own process (each has
# its own network namespace, run dir and cleanup). Prints a timing summary; exits non-zero if any
# scenario failed. A scenario exiting 77 (e.g. `ebof serve` not built yet) counts as skipped.
# tmp-checkout runs linux-smoke from a clone under /tmp (the guest must reach the binary wherever
# the checkout lives), in the bookworm and the trixie guest.
#
# Usage (as root): tests/interop/run-all.sh [SCENARIO...]
#   (default: tmp-checkout linux-target linux-initiator linux-control linux-resv linux-multipath linux-security linux-fleet linux-rdma linux-rdma2 linux-csi)
# Environment: EBOF_SKIP_INTEROP=1 skips everything; EBOF_BIN, EBOF_INTEROP_STRICT,
# EBOF_INTEROP_ARTIFACTS, ... are passed on to the scenarios (see lib.sh and each scenario).
set -uo pipefail
if [[ -n ${EBOF_SKIP_INTEROP:-} && ${EBOF_SKIP_INTEROP} != 0 ]]; then
	echo "interop: skipped (EBOF_SKIP_INTEROP=$EBOF_SKIP_INTEROP)"
	exit 0
fi
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

scenarios=("$@")
((${#scenarios[@]})) || scenarios=(tmp-checkout linux-target linux-initiator linux-control linux-resv linux-multipath linux-security linux-fleet linux-rdma linux-rdma2 linux-csi)

t0=$SECONDS
vm_setup
setup_secs=$((SECONDS - t0))

passed=0 failed=0 skipped=0
summary=()
for s in "${scenarios[@]}"; do
	s=${s%.sh}
	echo
	log "======== scenario $s ========"
	t=$SECONDS
	bash "$INTEROP_DIR/$s.sh"
	rc=$?
	case $rc in
	0) word=PASSED passed=$((passed + 1)) ;;
	77) word=SKIPPED skipped=$((skipped + 1)) ;;
	*) word="FAILED (status $rc)" failed=$((failed + 1)) ;;
	esac
	summary+=("$(printf '  %-24s %5ss  %s' "$s" $((SECONDS - t)) "$word")")
done

echo
echo "==== interop summary ===="
printf '  %-24s %5ss\n' "vm_setup" "$setup_secs"
printf '%s\n' "${summary[@]}"
printf '  %-24s %5ss\n' "total" $((SECONDS - t0))
echo "interop: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
