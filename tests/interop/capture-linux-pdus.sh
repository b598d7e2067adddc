#!/bin/bash
# Record the NVMe/TCP bytes the Linux initiator (Debian's 6.1 kernel in the QEMU guest) sends to
# `ebof serve`, and store the start of each host→target stream as golden vectors for the codec
# tests (crates/nvmf-tcp/tests/golden/). Not part of CI: run it when the golden files need
# refreshing (as root, after `cargo build --release -p ebof`).
# shellcheck disable=SC2317 # called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
NQN=nqn.2026-11.io.ebof:golden
OUT=${EBOF_GOLDEN_DIR:-$REPO_ROOT/crates/nvmf-tcp/tests/golden}
command -v tcpdump >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tcpdump >/dev/null

interop_init capture-linux-pdus
vm_setup
bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --listen "$HOST_IP:4420" --ram 64M --nqn "$NQN"
wait_listen 4420 30 "$(bg_pid target)" || die "ebof serve did not start"
bg_start tcpdump ip netns exec "$NS" tcpdump -i tap0 -U -s 0 -w "$RUN_DIR/cap.pcap" tcp port 4420
sleep 1
vm_env "NQN=$NQN" "TARGET_IP=$HOST_IP" "TARGET_PORT=4420"
vm_run "$INTEROP_DIR/capture-linux-pdus.guest.sh" 300
rc=$?
sleep 1
bg_stop tcpdump
bg_stop target
((rc == 0)) || die "guest run failed (status $rc)"
mkdir -p "$OUT"
python3 "$INTEROP_DIR/pcap-streams.py" "$RUN_DIR/cap.pcap" 4420 "$OUT" || die "extraction failed"
ls -l "$OUT"
