#!/bin/bash
# Scenario: the control plane as a connected Linux host sees it (issue 8). Namespaces added, resized
# and removed with `ebof ctl` while the host stays connected; the host rescans on the Namespace
# Attribute Changed event. A persistent discovery controller gets the Discovery Log Page Change
# event when a subsystem is added or removed. And `ebof bench quick --engine fio` on the connected
# host's block device (issue 10): the same report shape as the built-in engine's.
#
# And scale (issue 9): a subsystem of 1024 namespaces; the host lists them all and runs verified I/O
# on the last one.
#
# Host side (this script, inside a fresh network namespace): `ebof serve` with two subsystems
#   nqn.2026-11.io.ebof:ctl     64 MiB RAM namespace 1, 512-byte blocks
#   nqn.2026-11.io.ebof:scale   1024 RAM namespaces of 1 MiB (EBOF_INTEROP_SCALE_NS)
# listening on 10.77.0.1:4420 (+ discovery on 10.77.0.1:8009), any host allowed, and its management
# API on a Unix socket in the run dir. The guest cannot reach that socket (the 9p root is not a
# socket transport), so it asks the host to run `ebof ctl`: guest_request ctl "ARGS", answered by
# host_on_ctl with ctl's stdout in /xchg/ctl.out, its stderr in /xchg/ctl.err and its status.
# Guest side: linux-control.guest.sh.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-control.sh
# Environment:
#   EBOF_BIN               target binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 600)
#   EBOF_INTEROP_SEE_SECS  bound on each wait for the host to see a change (default 10)
#   EBOF_INTEROP_BENCH_SCALE  --duration-scale of the two `ebof bench quick` runs (default 0.5:
#                          at 0.1 a step measures 0.3 s, less than the first 128K QD64 writes
#                          take to complete in a loaded TCG guest, and could count none)
#   RUST_LOG               passed to `ebof serve` (default info)
# Exit status: 0 passed, 77 skipped (no `ebof serve`/`ctl`/`bench` yet and not EBOF_INTEROP_STRICT),
# else failed.
# shellcheck disable=SC2317 # start_target and host_on_ctl are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
CTL_NQN=nqn.2026-11.io.ebof:ctl
SCALE_NQN=nqn.2026-11.io.ebof:scale
SCALE_NS=${EBOF_INTEROP_SCALE_NS:-1024}
TARGET_PORT=4420
DISC_PORT=8009
export RUST_LOG=${RUST_LOG:-info}

need_ebof linux-control serve ctl bench

write_config() {
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-control.sh
[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT

[discovery]
address = "$HOST_IP"
port = $DISC_PORT

# the encryption steps' files (issue 37)
[management]
data_dirs = ["$RUN_DIR"]

[[subsystems]]
nqn = "$CTL_NQN"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "64M"
block_size = 512

# issue 9 scale: a subsystem of $SCALE_NS namespaces of 1 MiB
[[subsystems]]
nqn = "$SCALE_NQN"
allow_any_host = true
EOF
	local nsid
	for ((nsid = 1; nsid <= SCALE_NS; nsid++)); do
		printf '[[subsystems.namespaces]]\nnsid = %d\nbackend = "ram"\nsize = "1M"\n' "$nsid"
	done >>"$RUN_DIR/ebof.toml"
	echo "---- $RUN_DIR/ebof.toml (first 40 lines) ----"
	head -n 40 "$RUN_DIR/ebof.toml"
}

start_target() { serve_with_mgmt "$RUN_DIR/ebof.toml" "$TARGET_PORT" "$DISC_PORT"; }

# ---------------------------------------------------------------------------------------------

interop_init linux-control
vm_setup
# encryption at rest (issue 37): a 64-byte key (mode 0600) and two files each with a second name
# (a hard link: no `NAME.key` header beside it, so ebof serves it plain) for the guest's cryptsetup
head -c 64 /dev/urandom >"$RUN_DIR/crypt.key" && chmod 600 "$RUN_DIR/crypt.key" || die "cannot write the key"
for f in crypt-f crypt-g; do
	truncate -s 16M "$RUN_DIR/$f.img" && ln -f "$RUN_DIR/$f.img" "$RUN_DIR/$f-plain.img" || die "cannot make $f"
done
vm_env "CRYPT_KEY=$RUN_DIR/crypt.key" "CRYPT_KEY_HEX=$(xxd -p -c 64 "$RUN_DIR/crypt.key")" "CRYPT_DIR=$RUN_DIR"
vm_env "CTL_NQN=$CTL_NQN" "TARGET_PORT=$TARGET_PORT" "DISC_PORT=$DISC_PORT" "TARGET_IP=$HOST_IP" \
	"SEE_SECS=${EBOF_INTEROP_SEE_SECS:-10}" "SCALE_NS=$SCALE_NS" "BENCH_SCALE=${EBOF_INTEROP_BENCH_SCALE:-0.5}"

write_config
host_step "start ebof serve --mgmt-socket" start_target || die "the target did not start"
host_step "raw ICReq/ICResp on $HOST_IP:$TARGET_PORT" raw_icreq_check "$HOST_IP" "$TARGET_PORT" ||
	{ bg_log_tail target; die "the target does not answer an ICReq on $TARGET_PORT"; }
host_step "ebof ctl show" "$EBOF_BIN" ctl --socket "$MGMT_SOCK" show ||
	{ bg_log_tail target; die "ebof ctl cannot reach the management API"; }

vm_run "$INTEROP_DIR/linux-control.guest.sh" "${EBOF_INTEROP_TIMEOUT:-600}"
rc=$?
serve_check_after "$rc" || rc=$?
echo
timing_summary
if [[ -s $X/seen.tsv ]]; then
	echo "---- how long the host took to see each change (seconds) ----"
	printf '  %-52s %8s %8s  %s\n' "change" "ctl done" "asked" "from the nvme_async_event trace"
	awk -F'\t' '{ printf "  %-52s %8s %8s  %s\n", $1, $2, $3, $4 }' "$X/seen.tsv"
fi
host_summary
log "linux-control: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
