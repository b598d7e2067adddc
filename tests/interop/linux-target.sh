#!/bin/bash
# Scenario: our host tools against the Linux kernel's own NVMe/TCP target.
#
# Guest side (linux-target.guest.sh): nvmet + nvmet-tcp with subsystem nqn.2026-11.io.ebof:kernel
# (namespace 1 = a 512 MiB brd RAM disk, any host) on 10.77.0.2:4420. When it is ready it asks the
# host (guest_request target-ready) to run host_commands below, inside the network namespace, and
# waits for them.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-target.sh
# Environment:
#   EBOF_BIN               host tool binary (default <repo>/target/release/ebof); subcommands that do
#                          not exist yet are skipped (EBOF_INTEROP_STRICT=1 makes them fail)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 1200)
#   HOST_CMD_TIMEOUT       bound on each host command in seconds (default 120)
# Exit status: 0 passed, else failed.
# shellcheck disable=SC2317 # host_on_* and host_commands are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
KNQN=nqn.2026-11.io.ebof:kernel
KPORT=4420
: "${HOST_CMD_TIMEOUT:=120}"

# The host-side commands, run in order once the kernel target is up. Add lines here.
#   host_step TITLE CMD...        a program (run inside the netns) or a shell function
#   ebof_step TITLE SUBCMD ARGS   $EBOF_BIN SUBCMD ARGS; skipped while SUBCMD does not exist
host_commands() {
	local a=(-a "$GUEST_IP" -s "$KPORT") n=(-n "$KNQN")
	host_step "raw ICReq/ICResp with bash /dev/tcp" raw_icreq_check "$GUEST_IP" "$KPORT"
	ebof_step "ebof discover" discover "${a[@]}"
	ebof_step "ebof identify --json" identify "${a[@]}" "${n[@]}" --json
	# --range bounds the untimed --verify prefill (the TCG guest writes ~15 MiB/s).
	ebof_step "ebof perf randrw 4k qd8 5s --verify" \
		perf "${a[@]}" "${n[@]}" --rw randrw --bs 4k --qd 8 --runtime 5s --range 0-64M --verify
	ebof_step "ebof perf randrw 4k qd8 5s --verify, digests" \
		perf "${a[@]}" "${n[@]}" --rw randrw --bs 4k --qd 8 --runtime 5s --range 0-64M --verify --hdr-digest --data-digest
	ebof_step "ebof perf write 128k qd8 --verify, digests" \
		perf "${a[@]}" "${n[@]}" --rw write --bs 128k --qd 8 --runtime 3s --range 0-64M --verify --hdr-digest --data-digest
	host_step "identify: kernel nvmet vs ebof serve, same namespace size" compare_identify
}

# Identify the kernel target and an `ebof serve` twin (same namespace size) with our host tool and
# compare the answers (tests/interop/compare-identify.py: differences listed, required ones checked).
compare_identify() {
	local twin=nqn.2026-11.io.ebof:twin rc=0
	# `ip netns exec` execs the program, so the tracked PID is ebof itself.
	bg_start twin ip netns exec "$NS" "$EBOF_BIN" serve --listen "$HOST_IP:4420" --ram "${BRD_MIB:-512}M" --nqn "$twin"
	wait_listen 4420 30 "$(bg_pid twin)" || { bg_log_tail twin; bg_stop twin; return 1; }
	ns_exec timeout 60 "$EBOF_BIN" identify -a "$GUEST_IP" -s "$KPORT" -n "$KNQN" --json >"$RUN_DIR/id-kernel.json" || rc=1
	ns_exec timeout 60 "$EBOF_BIN" identify -a "$HOST_IP" -s 4420 -n "$twin" --json >"$RUN_DIR/id-ebof.json" || rc=1
	bg_stop twin
	((rc == 0)) || return 1
	python3 "$INTEROP_DIR/compare-identify.py" "$RUN_DIR/id-kernel.json" "$RUN_DIR/id-ebof.json" "$KNQN" "$twin"
}

# guest_request target-ready: run the host commands; the guest waits for the result
host_on_target_ready() {
	log "kernel target ready at $1"
	host_commands
	((HOST_FAILED == 0))
}

interop_init linux-target
vm_setup
vm_env "KERNEL_NQN=$KNQN" "TARGET_PORT=$KPORT" "HOST_TIMEOUT=${EBOF_INTEROP_TIMEOUT:-1200}"
vm_run "$INTEROP_DIR/linux-target.guest.sh" "${EBOF_INTEROP_TIMEOUT:-1200}"
rc=$?
[[ -d $X/facts ]] && log "kernel facts: $(cd "$X/facts" && echo *) (kept with EBOF_INTEROP_KEEP=1 or EBOF_INTEROP_ARTIFACTS)"
if ((rc == 0 && HOST_FAILED > 0)); then rc=1; fi
if ((rc == 0 && ${#HOST_RESULTS[@]} == 0)); then
	warn "the host commands never ran"
	rc=1
fi
echo
timing_summary
host_summary
log "linux-target: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
