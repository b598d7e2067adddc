#!/bin/bash
# Guest half of linux-smoke.sh: the binary under test is reachable at its one guest path
# ($EBOF_BIN = /ebof/ebof, whatever the flavour and wherever the host's checkout lives), runs, and
# as the userspace host discovers and identifies the host side's `ebof serve` over virtio-net.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

SMOKE_NQN=${SMOKE_NQN:-nqn.2026-11.io.ebof:smoke}

binary_runs() {
	[[ -n ${EBOF_BIN:-} ]] || fail "the host shared no ebof binary (EBOF_BIN is empty)"
	[[ $EBOF_BIN == "${GUEST_EBOF_DIR:-/ebof}"/* ]] || fail "EBOF_BIN=$EBOF_BIN is not under ${GUEST_EBOF_DIR:-/ebof}"
	mountpoint -q "${GUEST_EBOF_DIR:-/ebof}" || fail "${GUEST_EBOF_DIR:-/ebof} is not a mount point"
	run -t 60 "$EBOF_BIN" --version
}

discover() {
	local out
	out=$(run -t 60 "$EBOF_BIN" discover -a "$TARGET_IP" -s "$TARGET_PORT")
	echo "$out"
	grep -qF "$SMOKE_NQN" <<<"$out" || fail "the discovery log does not list $SMOKE_NQN"
}

identify() {
	local out
	out=$(run -t 60 "$EBOF_BIN" identify -a "$TARGET_IP" -s "$TARGET_PORT" -n "$SMOKE_NQN" --json)
	head -c 2000 <<<"$out"
	echo
	grep -qF "$SMOKE_NQN" <<<"$out" || fail "identify does not report $SMOKE_NQN"
}

step "$EBOF_BIN runs in the guest ($VM_FLAVOUR)" binary_runs
step "ebof discover $TARGET_IP:$TARGET_PORT from the guest" discover
step "ebof identify $SMOKE_NQN from the guest" identify
