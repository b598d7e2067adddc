#!/bin/bash
# Scenario: a CSI volume that authenticates its node (issue 32, security review K3) on a Linux host
# that has DH-HMAC-CHAP: the trixie guest (Linux 6.12, nvme-cli 2.13; bookworm's 6.1 kernel is
# built without CONFIG_NVME_AUTH, see linux-csi.sh). Run by linux-csi.sh after its own guest.
#
# Host side (this script, in a fresh network namespace): one pool box (`ebof serve`, NVMe/TCP on
# 10.77.0.1:4420, management API on TCP with a token, autosave) and `ebof csi --controller` beside
# it; the CSI client (tests/interop/csi_client.py) runs here too, because the trixie root has no
# python3-grpcio: it reaches the guest's node plugin through a TCP forwarder the guest runs
# (10.77.0.2:7700 -> the plugin's Unix socket).
# Guest side (linux-csi-auth.guest.sh): `ebof csi --node`; the host drives CreateVolume (default
# auth: dhchap), ControllerPublishVolume (the box gets this node's keys for the volume; the publish
# context carries them) and NodeStageVolume (the node connects with --dhchap-secret and
# --dhchap-ctrl-secret). Then: the guest's controllers authenticated both ways (sysfs); the host
# side presenting the node's NQN without the secret is refused (ebof identify); NodeUnstage, and
# with the node still published (allowed, keys on the box) the guest kernel connecting with the
# node's NQN and no secret is refused (while a controller of that NQN exists, nvme-cli 2.13 takes
# its key from sysfs: a local root can reuse it); ControllerUnpublishVolume (the key leaves the
# box's saved configuration), the secret opens nothing any more, DeleteVolume.
#
# Usage (as root; build first): tests/interop/linux-csi-auth.sh
# Environment: EBOF_BIN (default <repo>/target/release/ebof), EBOF_INTEROP_TIMEOUT (default 300),
# RUST_LOG (default info).
# Exit status: 0 passed, 77 skipped (no `ebof serve`/`csi` and not EBOF_INTEROP_STRICT), else failed.
# shellcheck disable=SC2317 # host_on_* are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
VM_FLAVOUR=trixie

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
TARGET_PORT=4420
API_PORT=9651
NODE_PORT=7700
PROTO=$REPO_ROOT/crates/ebof-csi/proto/csi.proto
export RUST_LOG=${RUST_LOG:-info}
CSI_PACKAGES=(python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev jq)

need_ebof linux-csi-auth serve csi

write_config() {
	mkdir -p "$RUN_DIR/pool"
	(umask 077 && head -c 32 /dev/urandom | base64 >"$RUN_DIR/token")
	make_api_cert "$RUN_DIR" "$HOST_IP" || return 1
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-csi-auth.sh: a pool box with no subsystem
[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT

[management]
listen = "$HOST_IP:$API_PORT"
token_file = "$RUN_DIR/token"
tls_cert = "$RUN_DIR/api-cert.pem"
tls_key = "$RUN_DIR/api-key.pem"
autosave = true

[[pools]]
name = "default"
directory = "$RUN_DIR/pool"
size = "256M"
EOF
	cat >"$RUN_DIR/boxes.toml" <<EOF
[[boxes]]
name = "box1"
api = "https://$HOST_IP:$API_PORT"
ca_file = "$RUN_DIR/ca.pem"
token_file = "$RUN_DIR/token"
EOF
}

gen_client() {
	protoc -I "$(dirname "$PROTO")" -I /usr/include --python_out="$RUN_DIR" "$PROTO" || return 1
	cp "$INTEROP_DIR/csi_client.py" "$RUN_DIR/csi_client.py"
}

start_box() { serve_with_mgmt "$RUN_DIR/ebof.toml" "$TARGET_PORT" "$API_PORT"; }

start_controller() {
	local i
	bg_start controller ip netns exec "$NS" "$EBOF_BIN" csi --endpoint "unix://$RUN_DIR/ctl.sock" \
		--controller --boxes "$RUN_DIR/boxes.toml"
	for ((i = 0; i < 100; i++)); do
		[[ -S $RUN_DIR/ctl.sock ]] && return 0
		sleep 0.1
	done
	bg_log_tail controller
	return 1
}

# csi_call ENDPOINT SERVICE METHOD JSON: one call through the client (in the netns); its JSON answer
# in $ANSWER; status 0 when the call succeeded
ANSWER=''
csi_call() {
	echo "+ csi $2.$3" >&2
	ANSWER=$(ip netns exec "$NS" /usr/bin/python3 "$RUN_DIR/csi_client.py" --endpoint "$1" call "$2" "$3" "$4")
	local rc=$?
	echo "  -> status $rc: ${ANSWER:0:300}" | sed -e 's/DHHC-1:[0-9][0-9]:[^"]*/DHHC-1:<secret>/g' >&2
	return "$rc"
}
ctl() { csi_call "unix://$RUN_DIR/ctl.sock" Controller "$@"; }
node() { csi_call "$GUEST_IP:$NODE_PORT" Node "$@"; }

CAP='{"mount": {"fs_type": "ext4"}, "access_mode": {"mode": "SINGLE_NODE_WRITER"}}'
VOL='' VCTX='' PCTX='' NODE_NQN='' STAGE=/var/lib/kubelet/plugins/kubernetes.io/csi/csi.ebof.io/auth/globalmount

# impostor NODE_NQN: this side presents the node's NQN with no secret; 0 when refused for want of
# DH-HMAC-CHAP, 1 when it gets in (or is refused for another reason)
impostor() {
	local out rc
	out=$(timeout -k 5 30 ip netns exec "$NS" "$EBOF_BIN" identify -a "$HOST_IP" -s "$TARGET_PORT" -n "$VOL" \
		--hostnqn "$1" 2>&1)
	rc=$?
	((rc != 0)) || { warn "connected to $VOL as $1 without a secret"; return 1; }
	[[ $out == *DH-HMAC-CHAP* ]] || { warn "refused, but not for authentication: $out"; return 1; }
	echo "refused as it must be: $1 without its secret"
}

# guest_request stage NODE_NQN: CreateVolume, ControllerPublishVolume, NodeStageVolume (on the
# guest's plugin), and the host side's impostor
host_on_stage() {
	NODE_NQN=$1
	ctl CreateVolume '{"name": "linux-csi-auth", "capacity_range": {"required_bytes": 33554432}, "volume_capabilities": ['"$CAP"']}' || return 1
	VOL=$(jq -r .volume.volume_id <<<"$ANSWER") VCTX=$(jq -c .volume.volume_context <<<"$ANSWER")
	[[ $(jq -r .auth <<<"$VCTX") == dhchap ]] || { warn "auth is not the default dhchap: $VCTX"; return 1; }
	ctl ControllerPublishVolume "{\"volume_id\": \"$VOL\", \"node_id\": \"$NODE_NQN\", \"volume_capability\": $CAP, \"volume_context\": $VCTX}" || return 1
	PCTX=$(jq -c .publish_context <<<"$ANSWER")
	[[ $(jq -r .dhchapSecret <<<"$PCTX") == DHHC-1:* ]] || { warn "no secret in the publish context"; return 1; }
	# the box saved the key with the host, in its configuration file only
	grep -q -F "$(jq -r .dhchapSecret <<<"$PCTX")" "$RUN_DIR/ebof.toml" || { warn "the key is not in the box's saved configuration"; return 1; }
	node NodeStageVolume "{\"volume_id\": \"$VOL\", \"staging_target_path\": \"$STAGE\", \"volume_capability\": $CAP, \"volume_context\": $VCTX, \"publish_context\": $PCTX}" || return 1
	impostor "$NODE_NQN" || return 1
	printf '%s\n' "$VOL" >"$X/vol"
}

# guest_request unstage: NodeUnstageVolume; the node stays published (allowed, with its keys)
host_on_unstage() {
	node NodeUnstageVolume "{\"volume_id\": \"$VOL\", \"staging_target_path\": \"$STAGE\"}" || return 1
	ip netns exec "$NS" "$EBOF_BIN" ctl --socket "$MGMT_SOCK" --json show |
		jq -e --arg v "$VOL" --arg n "$NODE_NQN" '.subsystems[] | select(.nqn == $v) | .hosts | index($n)' >/dev/null ||
		{ warn "$NODE_NQN is not allowed on $VOL any more"; return 1; }
}

# guest_request unpublish: ControllerUnpublishVolume (the key leaves the box)
host_on_unpublish() {
	ctl ControllerUnpublishVolume "{\"volume_id\": \"$VOL\", \"node_id\": \"$NODE_NQN\"}" || return 1
	! grep -q -F "$(jq -r .dhchapSecret <<<"$PCTX")" "$RUN_DIR/ebof.toml" || { warn "the key is still in the box's configuration"; return 1; }
	# the guest checks next that its secret opens nothing any more: it gets it for that only
	(umask 077 && jq -r .dhchapSecret <<<"$PCTX" >"$X/secret")
}

# guest_request delete: DeleteVolume
host_on_delete() {
	rm -f "$X/secret"
	ctl DeleteVolume "{\"volume_id\": \"$VOL\"}"
}

# after the guest: no secret of the volume in the logs
no_secret_in_logs() {
	local s f
	s=$(jq -r .dhchapSecret <<<"$PCTX" | cut -d: -f3)
	[[ -n $s ]] || return 0
	for f in "$RUN_DIR"/*.log "$X"/*.log; do
		[[ -e $f ]] || continue
		! grep -q -F "$s" "$f" || { warn "the secret is in $f"; return 1; }
	done
	echo "no log holds the volume's secret"
}

# ---------------------------------------------------------------------------------------------

interop_init linux-csi-auth
_apt_ensure "${CSI_PACKAGES[@]}"
vm_setup
vm_env "TARGET_IP=$HOST_IP" "TARGET_PORT=$TARGET_PORT" "NODE_PORT=$NODE_PORT" "STAGE=$STAGE" "RUST_LOG=$RUST_LOG"

write_config
host_step "CSI client: csi_pb2.py from csi.proto (protoc)" gen_client || die "cannot make the CSI client"
host_step "start the pool box (ebof serve, API on $HOST_IP:$API_PORT)" start_box || die "the box did not start"
host_step "start ebof csi --controller (here)" start_controller || die "the controller did not start"

vm_run "$INTEROP_DIR/linux-csi-auth.guest.sh" "${EBOF_INTEROP_TIMEOUT:-300}"
rc=$?
host_step "no log holds the secret" no_secret_in_logs || { ((rc == 0)) && rc=1; }
serve_check_after "$rc" || rc=$?
if ((rc != 0)); then
	bg_log_tail controller 30
	[[ -s $X/csi.log ]] && { echo "---- ebof csi --node log (guest) ----"; tail -n 30 "$X/csi.log"; }
fi
echo
timing_summary
host_summary
log "linux-csi-auth: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
