#!/bin/bash
# Guest half of linux-csi.sh: `ebof csi --controller --node` in the guest, driven step by step
# through the CSI client (/xchg/csi_client.py, one long-lived process in `serve` mode, one request
# a line) as a container orchestrator would: CreateVolume, ControllerPublish (the box allows this
# node's host NQN and installs this node's DH-HMAC-CHAP secrets for the volume), NodeStage (nvme
# connect with them, mkfs, mount; another machine with the node's NQN and no secret is refused), NodePublish (bind mount), I/O, stats,
# NodeUnpublish, NodeUnstage (umount, disconnect), stage again (the data is there), expansion
# without reconnecting, a read-only publish, a raw block volume, an XFS volume, idempotent repeats,
# and at the end nothing left on the box. The box's own view (`ebof ctl --json show`, for the
# host ACL) comes from the host (guest_request ctl).
#
# Every program started costs a good fraction of a second in the TCG guest, so the checks run in
# the shell itself where they can: the client answers flattened (KEY<TAB>VALUE lines read into
# the associative array R, no jq), requests are built with printf, mounts are read from
# /proc/self/mountinfo and sizes from sysfs.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

MIB=1048576
CSI_PREFIX=${CSI_PREFIX:-nqn.2026-11.io.ebof:csi:}
# the StorageClass auth of the volumes: dhchap where the guest kernel has DH-HMAC-CHAP host support
# (trixie), none where it has not (bookworm's 6.1: CONFIG_NVME_AUTH is not set)
CSI_AUTH=${CSI_AUTH:-none}
SOCK=/run/csi/csi.sock
export CSI_ENDPOINT=unix://$SOCK CSI_PB_DIR=$X CSI_TIMEOUT=150
DRIVER=csi.ebof.io
KUBELET=/var/lib/kubelet
PLUGIN_DIR=$KUBELET/plugins/kubernetes.io/csi/$DRIVER
DRIVER_PID='' NODE_NQN='' CAPACITY0=''
# the volume being worked on: ID, capability and contexts (JSON), its context's values, paths
VOL='' CAP='' CTX='' PCTX='{}' STAGE='' TARGET=''
declare -A VCTX=()
# the last answer: CODE (OK or a gRPC status code name), RESP (response JSON or error details),
# R (the response flattened)
CODE='' RESP=''
declare -A R=()
# what the helpers below find: the volume's controllers and device, a mount's fields
CTRLS='' DEV='' M_N=0 M_SRC='' M_FS='' M_OPTS=''

# ---------------------------------------------------------------------------------------------
# the CSI client

# _answer: read one answer of the client into CODE, RESP and R
_answer() {
	local head n i k v
	read -r -t 200 head <&"${CSI[0]}" || return 1
	R=()
	if [[ $head == "OK "* ]]; then
		CODE=OK n=${head#OK }
		read -r -t 10 RESP <&"${CSI[0]}" || return 1
		for ((i = 0; i < n; i++)); do
			IFS=$'\t' read -r -t 10 k v <&"${CSI[0]}" || return 1
			R[$k]=$v
		done
	else
		CODE=${head#ERR }
		read -r -t 10 RESP <&"${CSI[0]}" || return 1
	fi
}

# driver_gone: the driver exited (gone, or a zombie not reaped yet)
driver_gone() { [[ ! -e /proc/$DRIVER_PID || $(</proc/"$DRIVER_PID"/stat) == *") Z "* ]]; }

# csi_call SERVICE METHOD [JSON]: one CSI call; returns 1 unless it succeeded
csi_call() {
	local req=${3:-} t0 ms frac
	[[ -n $req ]] || req='{}'
	echo "+ csi $1.$2 $req" >&2
	t0=$(_us)
	printf '%s %s %s\n' "$1" "$2" "$req" >&"${CSI[1]}"
	_answer || fail "no answer from the CSI client to $1.$2 (client log: $(<"$X/csi-client.err"))"
	ms=$((($(_us) - t0) / 1000))
	printf -v frac '%03d' $((ms % 1000))
	echo "  -> $CODE in $((ms / 1000)).$frac s: ${RESP:0:500}" >&2
	if [[ $CODE != OK ]] && driver_gone; then
		tail -n 30 "$X/csi.log"
		fail "ebof csi (pid $DRIVER_PID) is not running any more"
	fi
	[[ $CODE == OK ]]
}
# csi SERVICE METHOD [JSON]: the call must succeed
csi() { csi_call "$@" || fail "$1.$2 failed: $CODE: $RESP"; }
# csi_refused CODE|ANY SERVICE METHOD [JSON]: the call must fail (with CODE)
csi_refused() {
	local want=$1
	shift
	if csi_call "$@"; then fail "$1.$2 succeeded; it must fail"; fi
	[[ $want == ANY || $CODE == "$want" ]] || fail "$1.$2 failed with $CODE; expected $want"
	echo "refused as expected: $CODE: $RESP"
}
# flat FILE: read a JSON file through the client into R (no jq)
flat() {
	printf 'FLAT %s\n' "$1" >&"${CSI[1]}"
	_answer || fail "no answer from the CSI client to FLAT $1"
	[[ $CODE == OK ]] || fail "cannot read $1 as JSON: $RESP"
}
# r_any PATTERN VALUE: some key matching the glob PATTERN has a value matching the glob VALUE
r_any() {
	local k
	for k in "${!R[@]}"; do
		# shellcheck disable=SC2053 # globs on purpose
		[[ $k == $1 && ${R[$k]} == $2 ]] && return 0
	done
	return 1
}
# r_object PREFIX: the string members under PREFIX. as a JSON object
r_object() {
	local k out='' v kk
	for k in "${!R[@]}"; do
		[[ $k == "$1".* ]] || continue
		jstr kk "${k#"$1".}"
		jstr v "${R[$k]}"
		out+=${out:+,}$kk:$v
	done
	echo "{$out}"
}
# jstr VAR TEXT: VAR = TEXT as a JSON string
jstr() {
	local s=${2//\\/\\\\}
	s=${s//\"/\\\"}
	printf -v "$1" '"%s"' "$s"
}

# ebof_ctl ARGS...: `ebof ctl ARGS` on the host against the box; its output is in /xchg/ctl.out
ebof_ctl() {
	local rc=0
	guest_request ctl "$*" 60 >&2 || rc=$?
	((rc == 0)) || { cat "$X/ctl.err"; fail "ebof ctl $* failed (status $rc)"; }
}
# box_subsystem NQN: R = the box's state; sets BOX_SUB (the key prefix of subsystem NQN, empty
# when the box has none), BOX_ANY (its allow_any_host) and BOX_HOSTS (its allowed hosts)
BOX_SUB='' BOX_ANY='' BOX_HOSTS=''
box_subsystem() {
	local k
	ebof_ctl --json show
	flat "$X/ctl.out"
	BOX_SUB='' BOX_ANY='' BOX_HOSTS=''
	for k in "${!R[@]}"; do
		[[ $k == subsystems.*.nqn && ${R[$k]} == "$1" ]] && BOX_SUB=${k%.nqn}
	done
	[[ -n $BOX_SUB ]] || return 0
	BOX_ANY=${R[$BOX_SUB.allow_any_host]}
	for k in "${!R[@]}"; do
		[[ $k == "$BOX_SUB".hosts.* ]] && BOX_HOSTS+=" ${R[$k]}"
	done
	BOX_HOSTS=${BOX_HOSTS# }
}

cap_mount() { printf '{"mount": {"fs_type": "%s"}, "access_mode": {"mode": "SINGLE_NODE_WRITER"}}' "$1"; }
CAP_BLOCK='{"block": {}, "access_mode": {"mode": "SINGLE_NODE_WRITER"}}'

# ---------------------------------------------------------------------------------------------
# this node's view, without starting programs

TARGET_PORTS=${TARGET_PORTS:-4420}

# vol_ctrls: CTRLS = "nvme0:CNTLID ..." of the volume's subsystem
vol_ctrls() {
	local c
	CTRLS=''
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/subsysnqn && $(<"$c/subsysnqn") == "$VOL" ]] && CTRLS+=" ${c##*/}:$(<"$c/cntlid")"
	done
	CTRLS=${CTRLS# }
	return 0
}
# vol_dev: DEV = the volume's block device (found by its UUID, as the driver does); 1 if none
vol_dev() {
	local b
	DEV=''
	for b in /sys/block/nvme*n*; do
		[[ ${b##*/} == nvme*c*n* || ! -r $b/uuid ]] && continue
		[[ $(<"$b/uuid") == "${VCTX[uuid]}" ]] && DEV=/dev/${b##*/} && return 0
	done
	return 1
}
dev_bytes() { echo $(($(<"/sys/block/${1#/dev/}/size") * 512)); }
# mnt PATH: M_N = how many mounts are at PATH; M_SRC, M_FS, M_OPTS of the top one
mnt() {
	local _id _parent _devno _root target opts rest
	M_N=0 M_SRC='' M_FS='' M_OPTS=''
	while read -r _id _parent _devno _root target opts rest; do
		[[ $target == "$1" ]] || continue
		M_N=$((M_N + 1)) M_OPTS=$opts
		rest=" $rest"
		rest=${rest#* - }
		M_FS=${rest%% *} rest=${rest#* }
		M_SRC=${rest%% *}
	done </proc/self/mountinfo
}
mounted() { mnt "$1" && ((M_N > 0)); }
fs_bytes() { df -B1 --output=size "$1" | while read -r s; do [[ $s =~ ^[0-9]+$ ]] && echo "$s"; done; }

# requests for the current volume
req_stage() {
	printf '{"volume_id": "%s", "staging_target_path": "%s", "volume_capability": %s, "volume_context": %s, "publish_context": %s}' \
		"$VOL" "$STAGE" "$CAP" "$CTX" "$PCTX"
}
req_publish() { # req_publish TARGET READONLY(true|false)
	printf '{"volume_id": "%s", "staging_target_path": "%s", "target_path": "%s", "readonly": %s, "volume_capability": %s, "volume_context": %s, "publish_context": %s}' \
		"$VOL" "$STAGE" "$1" "$2" "$CAP" "$CTX" "$PCTX"
}
req_vol() { printf '{"volume_id": "%s"}' "$VOL"; }
req_unpublish() { printf '{"volume_id": "%s", "target_path": "%s"}' "$VOL" "$1"; }
req_unstage() { printf '{"volume_id": "%s", "staging_target_path": "%s"}' "$VOL" "$STAGE"; }
req_stats() { printf '{"volume_id": "%s", "volume_path": "%s"}' "$VOL" "$1"; }
req_cpub() {
	printf '{"volume_id": "%s", "node_id": "%s", "volume_capability": %s, "readonly": false, "volume_context": %s}' \
		"$VOL" "$NODE_NQN" "$CAP" "$CTX"
}
req_cexpand() { # req_cexpand BYTES
	printf '{"volume_id": "%s", "capacity_range": {"required_bytes": %s}, "volume_capability": %s}' "$VOL" "$1" "$CAP"
}
req_nexpand() { # req_nexpand PATH BYTES
	printf '{"volume_id": "%s", "volume_path": "%s", "staging_target_path": "%s", "capacity_range": {"required_bytes": %s}, "volume_capability": %s}' \
		"$VOL" "$1" "$STAGE" "$2" "$CAP"
}

# ---------------------------------------------------------------------------------------------
# steps: the driver

start_driver() {
	[[ -n ${EBOF_BIN:-} ]] || fail "the host shared no ebof binary"
	local u
	read -r u </proc/sys/kernel/random/uuid # (nvme gen-hostnqn: all zeros without a DMI UUID)
	NODE_NQN=nqn.2014-08.org.nvmexpress:uuid:$u
	echo "node ID (host NQN): $NODE_NQN"
	mkdir -p "${SOCK%/*}"
	"$EBOF_BIN" csi --endpoint "unix://$SOCK" --controller --boxes "$X/boxes.toml" --node \
		--node-id "$NODE_NQN" >"$X/csi.log" 2>&1 &
	DRIVER_PID=$!
	echo "ebof csi: pid $DRIVER_PID"
	wait_for 30 _sock_up || { cat "$X/csi.log"; fail "ebof csi did not bind $SOCK within 30 s"; }
	[[ -S $SOCK ]] || { cat "$X/csi.log"; fail "ebof csi exited before serving"; }
	# the client: one process for every call (coproc: CSI[0] its output, CSI[1] its input)
	# with the newest grpcio from PyPI when the host provided it (it sends the socket path as
	# :authority), else Debian's python3-grpcio
	if [[ -d $X/pypi ]]; then
		coproc CSI { PYTHONPATH=$X/pypi CSI_PB_DIR=$X/pypi exec /usr/bin/python3 "$X/csi_client.py" serve 2>>"$X/csi-client.err"; }
		echo "CSI client: pid $CSI_PID, $(PYTHONPATH=$X/pypi /usr/bin/python3 -c 'import grpc; print("grpcio", grpc.__version__, "from PyPI")')"
	else
		coproc CSI { exec /usr/bin/python3 "$X/csi_client.py" serve 2>>"$X/csi-client.err"; }
		echo "CSI client: pid $CSI_PID, $(/usr/bin/python3 -c 'import grpc; print("grpcio", grpc.__version__, "(Debian)")')"
	fi
}

# Debian's python3-grpcio too, one call at a time: a second client of another grpc-core
debian_client() {
	local out
	out=$(CSI_PB_DIR=$X /usr/bin/python3 "$X/csi_client.py" call Identity GetPluginInfo) ||
		fail "GetPluginInfo through Debian's python3-grpcio: $out"
	echo "$out"
	[[ $out == *"\"$DRIVER\""* ]] || fail "GetPluginInfo through Debian's python3-grpcio: $out"
	out=$(CSI_PB_DIR=$X /usr/bin/python3 "$X/csi_client.py" call Controller GetCapacity) ||
		fail "GetCapacity through Debian's python3-grpcio: $out"
	echo "grpcio $(/usr/bin/python3 -c 'import grpc; print(grpc.__version__)') (Debian): $out"
}
# _sock_up: the driver's socket is there, or the driver is gone (no point waiting)
_sock_up() { [[ -S $SOCK ]] || driver_gone; }

identity() {
	local c
	csi Identity GetPluginInfo
	[[ ${R[name]} == "$DRIVER" ]] || fail "GetPluginInfo name is ${R[name]}, not $DRIVER"
	[[ -n ${R[vendor_version]} ]] || fail "GetPluginInfo has no vendor_version"
	csi Identity Probe
	[[ ${R[ready]:-true} == true ]] || fail "Probe says not ready"
	csi Identity GetPluginCapabilities
	r_any 'capabilities.*.service.type' CONTROLLER_SERVICE || fail "GetPluginCapabilities lacks CONTROLLER_SERVICE"
	csi Node NodeGetInfo
	[[ ${R[node_id]} == "$NODE_NQN" ]] || fail "NodeGetInfo node_id ${R[node_id]}, expected $NODE_NQN"
	csi Node NodeGetCapabilities
	for c in STAGE_UNSTAGE_VOLUME EXPAND_VOLUME GET_VOLUME_STATS; do
		r_any 'capabilities.*.rpc.type' "$c" || fail "NodeGetCapabilities lacks $c"
	done
	csi Controller ControllerGetCapabilities
	for c in CREATE_DELETE_VOLUME PUBLISH_UNPUBLISH_VOLUME EXPAND_VOLUME LIST_VOLUMES GET_CAPACITY; do
		r_any 'capabilities.*.rpc.type' "$c" || fail "ControllerGetCapabilities lacks $c"
	done
	csi Controller GetCapacity
	CAPACITY0=${R[available_capacity]:-0}
	echo "GetCapacity: $CAPACITY0 bytes available"
	((CAPACITY0 > 512 * MIB)) || fail "GetCapacity $CAPACITY0: the box's 1 GiB pool is not seen"
}

# create_volume NAME SIZE_MIB CAP [AUTH]: CreateVolume (StorageClass auth AUTH, default $CSI_AUTH) (twice: idempotent by name); sets VOL, CAP, CTX,
# VCTX, STAGE
create_volume() {
	local name=$1 size=$(($2 * MIB)) req k p
	CAP=$3
	req=$(printf '{"name": "%s", "capacity_range": {"required_bytes": %s}, "volume_capabilities": [%s], "parameters": {"auth": "%s"}}' \
		"$name" "$size" "$CAP" "${4:-$CSI_AUTH}")
	csi Controller CreateVolume "$req"
	VOL=${R[volume.volume_id]} CTX=$(r_object volume.volume_context) PCTX='{}'
	VCTX=()
	for k in "${!R[@]}"; do [[ $k == volume.volume_context.* ]] && VCTX[${k#volume.volume_context.}]=${R[$k]}; done
	echo "volume $VOL, ${R[volume.capacity_bytes]} bytes, context $CTX"
	[[ $VOL == "$CSI_PREFIX"* ]] || fail "volume ID $VOL does not start with $CSI_PREFIX"
	((${R[volume.capacity_bytes]:-0} >= size)) || fail "capacity_bytes ${R[volume.capacity_bytes]} < $size"
	[[ ${VCTX[nqn]} == "$VOL" ]] || fail "volume_context.nqn is not the volume ID"
	[[ ${VCTX[uuid]} =~ ^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$ ]] || fail "volume_context.uuid is not a UUID"
	for p in $TARGET_PORTS; do
		[[ ,${VCTX[listeners]}, == *",tcp:$TARGET_IP:$p,"* ]] || fail "volume_context.listeners lacks tcp:$TARGET_IP:$p"
	done
	[[ -n ${VCTX[box]} ]] || fail "volume_context has no box"
	csi Controller CreateVolume "$req"
	[[ ${R[volume.volume_id]} == "$VOL" ]] || fail "CreateVolume again for $name made ${R[volume.volume_id]}, not $VOL"
	csi Controller GetCapacity
	((${R[available_capacity]:-0} < CAPACITY0)) || fail "GetCapacity did not fall (${R[available_capacity]})"
	# the kubelet's paths: a per-volume staging directory
	STAGE=$PLUGIN_DIR/${VOL##*-}/globalmount
}

stage_refused_before_publish() {
	csi_refused ANY Node NodeStageVolume "$(req_stage)"
	vol_ctrls
	[[ -z $CTRLS ]] || fail "a controller of $VOL is connected although the box does not allow $NODE_NQN"
	! mounted "$STAGE" || fail "$STAGE is mounted after a failed NodeStage"
}

controller_publish() {
	local secret
	csi Controller ControllerPublishVolume "$(req_cpub)"
	PCTX=$(r_object publish_context) secret=${R[publish_context.dhchapSecret]:-}
	# auth: dhchap: this node's own secrets for this volume, the same when repeated; none: none
	if [[ ${VCTX[auth]:-} == dhchap ]]; then
		[[ $secret == DHHC-1:* && ${R[publish_context.dhchapCtrlSecret]:-} == DHHC-1:* ]] ||
			fail "the publish context has no DH-HMAC-CHAP secrets"
	else
		[[ ${VCTX[auth]:-} == none && $PCTX == '{}' ]] || fail "auth '${VCTX[auth]:-}', publish context $PCTX"
	fi
	csi Controller ControllerPublishVolume "$(req_cpub)" # idempotent
	[[ ${R[publish_context.dhchapSecret]:-} == "$secret" ]] || fail "a repeated ControllerPublish changed the node's secret"
	box_subsystem "$VOL"
	echo "box: $VOL allow_any_host $BOX_ANY, hosts [$BOX_HOSTS]"
	[[ $BOX_ANY == false && $BOX_HOSTS == "$NODE_NQN" ]] || fail "the box does not allow just $NODE_NQN on $VOL"
}

controller_unpublish() {
	local req
	req=$(printf '{"volume_id": "%s", "node_id": "%s"}' "$VOL" "$NODE_NQN")
	csi Controller ControllerUnpublishVolume "$req"
	csi Controller ControllerUnpublishVolume "$req" # idempotent
	box_subsystem "$VOL"
	echo "box: $VOL allow_any_host $BOX_ANY, hosts [$BOX_HOSTS]"
	[[ " $BOX_HOSTS " != *" $NODE_NQN "* && $BOX_ANY != true ]] || fail "the box still lets $NODE_NQN in on $VOL"
}

delete_volume() {
	csi Controller DeleteVolume "$(req_vol)"
	csi Controller DeleteVolume "$(req_vol)" # an unknown volume: OK
	box_subsystem "$VOL"
	[[ -z $BOX_SUB ]] || fail "$VOL is still on the box after DeleteVolume"
}

# node_stage [again]: NodeStageVolume; checks the connection, the device and (mount) the mount;
# with "again" a second NodeStage that must change nothing
node_stage() {
	local ctrls
	csi Node NodeStageVolume "$(req_stage)"
	vol_ctrls
	[[ -n $CTRLS ]] || fail "no NVMe controller of $VOL after NodeStage"
	local -a c l
	read -r -a c <<<"$CTRLS"
	read -r -a l <<<"$TARGET_PORTS"
	((${#c[@]} == ${#l[@]})) || fail "${#c[@]} controllers of $VOL after NodeStage ($CTRLS): one per listener (${#l[@]}) expected"
	vol_dev || fail "no block device with UUID ${VCTX[uuid]} after NodeStage"
	echo "connected: controllers [$CTRLS], device $DEV ($(dev_bytes "$DEV") bytes)"
	if [[ $CAP == *'"mount"'* ]]; then
		mounted "$STAGE" || fail "$STAGE is not mounted after NodeStage"
		echo "$STAGE: $M_SRC $M_FS $M_OPTS"
		[[ $CAP == *"\"$M_FS\""* ]] || fail "$STAGE is $M_FS, not what $CAP asks"
		[[ $M_SRC == "$DEV" ]] || fail "$STAGE is $M_SRC, not $DEV"
	fi
	if [[ ${1:-} == again ]]; then
		ctrls=$CTRLS
		csi Node NodeStageVolume "$(req_stage)"
		vol_ctrls
		[[ $CTRLS == "$ctrls" ]] || fail "a repeated NodeStage changed the controllers: [$ctrls] -> [$CTRLS]"
		mnt "$STAGE"
		((M_N <= 1)) || fail "a repeated NodeStage mounted $STAGE $M_N times"
	fi
}

# node_unstage [again]: NodeUnstageVolume; nothing mounted, no controller, no device; with
# "again" a second one on the unstaged volume (OK)
node_unstage() {
	csi Node NodeUnstageVolume "$(req_unstage)"
	! mounted "$STAGE" || fail "$STAGE is still mounted after NodeUnstage"
	vol_ctrls
	[[ -z $CTRLS ]] || fail "controllers of $VOL remain after NodeUnstage: $CTRLS"
	! vol_dev || fail "the block device of $VOL ($DEV) remains after NodeUnstage"
	echo "unstaged: no controller of $VOL, $STAGE not mounted"
	if [[ ${1:-} == again ]]; then
		csi Node NodeUnstageVolume "$(req_unstage)"
	fi
}

# node_publish TARGET [ro|rw] [again]
node_publish() {
	local t=$1 ro=false want=rw
	[[ ${2:-} == ro ]] && ro=true want=ro
	csi Node NodePublishVolume "$(req_publish "$t" "$ro")"
	mounted "$t" || fail "$t is not a mount point after NodePublish"
	echo "$t: $M_SRC $M_FS $M_OPTS"
	[[ ${M_OPTS%%,*} == "$want" ]] || fail "$t is mounted $M_OPTS, readonly=$ro asked"
	if [[ ${3:-} == again ]]; then
		csi Node NodePublishVolume "$(req_publish "$t" "$ro")"
		mnt "$t"
		((M_N == 1)) || fail "a repeated NodePublish left $M_N mounts at $t"
	fi
}

node_unpublish() {
	csi Node NodeUnpublishVolume "$(req_unpublish "$1")"
	! mounted "$1" || fail "$1 is still mounted after NodeUnpublish"
	csi Node NodeUnpublishVolume "$(req_unpublish "$1")" # again: OK
}

# node_refusals: what the Node service must refuse, and with which code (nothing changes)
node_refusals() {
	csi_refused FAILED_PRECONDITION Node NodePublishVolume "$(req_publish "$TARGET" false)"
	! mounted "$TARGET" || fail "$TARGET is mounted after a refused NodePublish"
	csi_refused INVALID_ARGUMENT Node NodeStageVolume "$(printf '{"volume_id": "%s", "staging_target_path": "%s", "volume_context": %s}' "$VOL" "$STAGE" "$CTX")"
	csi_refused INVALID_ARGUMENT Node NodeStageVolume "$(printf '{"volume_id": "%s", "staging_target_path": "%s", "volume_capability": %s}' "$VOL" "$STAGE" "$CAP")"
	csi_refused INVALID_ARGUMENT Node NodePublishVolume "$(printf '{"volume_id": "%s", "staging_target_path": "%s", "volume_capability": %s}' "$VOL" "$STAGE" "$CAP")"
	csi_refused NOT_FOUND Node NodeGetVolumeStats "$(req_stats /var/lib/kubelet/pods/none/mount)"
	csi_refused NOT_FOUND Node NodeExpandVolume "$(req_nexpand /var/lib/kubelet/pods/none/mount $((128 * MIB)))"
	vol_ctrls
	[[ -z $CTRLS ]] || fail "a refused call connected $VOL"
}

# restart_driver: SIGKILL (a crash) and start again with the same arguments; the node keeps no
# state, so what is staged and published stays usable
restart_driver() {
	kill -KILL "$DRIVER_PID"
	wait_for 10 driver_gone || fail "ebof csi did not die on SIGKILL"
	wait "$DRIVER_PID" || true
	"$EBOF_BIN" csi --endpoint "unix://$SOCK" --controller --boxes "$X/boxes.toml" --node \
		--node-id "$NODE_NQN" >>"$X/csi.log" 2>&1 &
	DRIVER_PID=$!
	echo "ebof csi restarted: pid $DRIVER_PID (it replaces the stale socket; the client reconnects)"
	# the old socket file is still there until the new driver replaces it: Probe until it answers,
	# as a liveness probe would
	wait_for 30 csi_call Identity Probe || fail "the restarted ebof csi does not answer Probe: $CODE: $RESP"
}

# ---------------------------------------------------------------------------------------------
# steps: a mount volume (ext4)

SUMS='' CTRL_BEFORE='' FS_BEFORE=''
POD1=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000001/volumes/kubernetes.io~csi/pvc-ext4/mount
POD2=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000002/volumes/kubernetes.io~csi/pvc-ext4/mount

write_files() {
	head -c $((4 * MIB)) /dev/urandom >"$TARGET/data.bin"
	printf 'written through %s on %s\n' "$VOL" "$NODE_NQN" >"$TARGET/hello.txt"
	sync
	SUMS=$(cd "$TARGET" && sha256sum data.bin hello.txt)
	echo "$SUMS"
}
volume_stats() {
	local k used='' total='' inodes=''
	csi Node NodeGetVolumeStats "$(req_stats "$TARGET")"
	for k in "${!R[@]}"; do
		[[ $k == usage.*.unit ]] || continue
		case ${R[$k]} in
		BYTES) used=${R[${k%.unit}.used]} total=${R[${k%.unit}.total]} ;;
		INODES) inodes=${R[${k%.unit}.used]} ;;
		esac
	done
	echo "bytes: used $used of $total; inodes used: $inodes"
	((used >= 4 * MIB)) || fail "NodeGetVolumeStats used $used < the 4 MiB written"
	((total > 40 * MIB && total <= 64 * MIB)) || fail "NodeGetVolumeStats total $total is not a 64 MiB file system's"
	[[ -n $inodes ]] || fail "no inode usage"
}
files_are_there() {
	local sums
	sums=$(cd "$1" && sha256sum data.bin hello.txt) || fail "the files are not in $1"
	[[ $sums == "$SUMS" ]] || fail "the files in $1 differ: $sums"
	echo "same content in $1"
}
stage_publish_again() {
	node_stage again
	node_publish "$TARGET" rw again
	files_are_there "$TARGET"
}
# half_done_stage: a stage left half done behind the driver's back (a crash between the connects
# and the mount, a path that failed): one path disconnected and the staging mount gone;
# NodeStage connects the missing path and mounts again, without formatting
_ctrl_gone() { [[ ! -e /sys/class/nvme/$1 ]]; }
half_done_stage() {
	local first
	vol_ctrls
	first=${CTRLS%% *}
	first=${first%:*}
	run nvme disconnect -d "$first"
	wait_for 20 _ctrl_gone "$first" || fail "$first still there after nvme disconnect -d"
	run umount "$STAGE"
	! mounted "$STAGE" || fail "cannot unmount $STAGE"
	vol_ctrls
	echo "half done: controllers [$CTRLS], $STAGE not mounted"
	node_stage
	files_are_there "$STAGE"
	files_are_there "$TARGET"
}
# after_restart: the restarted driver: NodeStage and NodePublish of what is staged and published
# are OK and change nothing
after_restart() {
	node_stage again
	node_publish "$TARGET" rw again
	files_are_there "$TARGET"
	CTRL_BEFORE=$CTRLS FS_BEFORE=$(fs_bytes "$TARGET")
	echo "before the expansion: controllers [$CTRL_BEFORE], file system $FS_BEFORE bytes"
}
expand() {
	local size fs_after
	csi Controller ControllerExpandVolume "$(req_cexpand $((128 * MIB)))"
	((${R[capacity_bytes]:-0} >= 128 * MIB)) || fail "ControllerExpandVolume capacity ${R[capacity_bytes]}"
	[[ ${R[node_expansion_required]} == true ]] || fail "a mount volume needs node expansion"
	csi Node NodeExpandVolume "$(req_nexpand "$TARGET" $((128 * MIB)))"
	((${R[capacity_bytes]:-0} >= 128 * MIB)) || fail "NodeExpandVolume capacity ${R[capacity_bytes]}"
	vol_dev || fail "the device is gone"
	size=$(dev_bytes "$DEV")
	df -h "$TARGET"
	fs_after=$(fs_bytes "$TARGET")
	vol_ctrls
	echo "device $DEV $size bytes; file system $FS_BEFORE -> $fs_after bytes; controllers [$CTRL_BEFORE] -> [$CTRLS]"
	((size == 128 * MIB)) || fail "$DEV is $size bytes, not 128 MiB"
	((fs_after > FS_BEFORE + 50 * MIB)) || fail "the file system did not grow ($FS_BEFORE -> $fs_after bytes)"
	[[ $CTRLS == "$CTRL_BEFORE" ]] || fail "the controllers changed (a reconnect?): [$CTRL_BEFORE] -> [$CTRLS]"
	files_are_there "$TARGET"
	# more than the old file system could hold at all
	run fallocate -l $((72 * MIB)) "$TARGET/big.bin" || fail "cannot allocate 72 MiB in the grown file system"
	rm "$TARGET/big.bin"
}
readonly_publish() {
	local err
	node_publish "$POD2" ro
	files_are_there "$POD2"
	if err=$(: 2>&1 >"$POD2/nope"); then fail "writing into the read-only publish $POD2 succeeded"; fi
	echo "write: $err"
	[[ $err == *"Read-only file system"* ]] || fail "the write failed, but not with EROFS: $err"
	echo ok >"$TARGET/rw.txt" || fail "the read-write publish $TARGET no longer writes"
	rm "$TARGET/rw.txt"
	node_unpublish "$POD2"
}
ext4_cleanup() {
	node_unpublish "$TARGET"
	node_unstage again
	controller_unpublish
	delete_volume
}

# ---------------------------------------------------------------------------------------------
# steps: a raw block volume

BLK_TARGET=$KUBELET/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-block/11111111-aaaa-4bbb-8ccc-000000000003

block_stage_publish() {
	local devnos
	node_stage again
	csi Node NodePublishVolume "$(req_publish "$BLK_TARGET" false)"
	[[ -b $BLK_TARGET ]] || fail "$BLK_TARGET is not a block device after NodePublish"
	mounted "$BLK_TARGET" || fail "$BLK_TARGET is not a bind mount"
	devnos=$(stat -L -c '%t:%T' "$BLK_TARGET" "$DEV" | xargs)
	[[ ${devnos% *} == "${devnos#* }" ]] || fail "$BLK_TARGET and the volume's $DEV are different devices: $devnos"
	echo "$BLK_TARGET: the volume's device $DEV (${devnos% *})"
	csi Node NodePublishVolume "$(req_publish "$BLK_TARGET" false)" # again: OK
	mnt "$BLK_TARGET"
	((M_N == 1)) || fail "a repeated NodePublish left $M_N mounts at $BLK_TARGET"
}
block_io() {
	local a b
	head -c $((8 * MIB)) /dev/urandom >/tmp/pattern
	run dd if=/tmp/pattern of="$BLK_TARGET" bs=1M oflag=direct conv=fsync status=none
	a=$(sha256sum </tmp/pattern)
	b=$(dd if="$BLK_TARGET" bs=1M count=8 iflag=direct status=none | sha256sum)
	[[ $a == "$b" ]] || fail "read back $b, wrote $a"
	echo "8 MiB pattern written with O_DIRECT and read back: ${a%% *}"
	csi Node NodeGetVolumeStats "$(req_stats "$BLK_TARGET")"
	((${R[usage.0.total]:-0} == 32 * MIB)) || fail "NodeGetVolumeStats total of the block volume: ${R[usage.0.total]}"
}
# block_expand: ControllerExpand of a raw block volume needs no node step (the kernel sees the
# new size through the Namespace Attribute Changed event); a NodeExpand anyway is OK
_dev_is() { [[ $(dev_bytes "$DEV") == "$1" ]]; }
block_expand() {
	local ctrls b
	vol_ctrls
	ctrls=$CTRLS
	csi Controller ControllerExpandVolume "$(req_cexpand $((48 * MIB)))"
	((${R[capacity_bytes]:-0} >= 48 * MIB)) || fail "ControllerExpandVolume capacity ${R[capacity_bytes]}"
	[[ ${R[node_expansion_required]} == false ]] || fail "a raw block volume needs no node expansion"
	wait_for 20 _dev_is $((48 * MIB)) || fail "$DEV is $(dev_bytes "$DEV") bytes 20 s after the expansion, not 48 MiB"
	echo "$DEV: $(dev_bytes "$DEV") bytes, seen by the kernel by itself"
	csi Node NodeExpandVolume "$(req_nexpand "$BLK_TARGET" $((48 * MIB)))"
	((${R[capacity_bytes]:-0} == 48 * MIB)) || fail "NodeExpandVolume capacity ${R[capacity_bytes]}"
	[[ $(blockdev --getsize64 "$BLK_TARGET") == $((48 * MIB)) ]] || fail "$BLK_TARGET is not 48 MiB"
	vol_ctrls
	[[ $CTRLS == "$ctrls" ]] || fail "the controllers changed: [$ctrls] -> [$CTRLS]"
	b=$(dd if="$BLK_TARGET" bs=1M count=8 iflag=direct status=none | sha256sum)
	[[ $b == "$(sha256sum </tmp/pattern)" ]] || fail "the pattern changed with the expansion"
}
block_cleanup() {
	node_unpublish "$BLK_TARGET"
	[[ ! -e $BLK_TARGET ]] || fail "NodeUnpublish left the file $BLK_TARGET"
	node_unstage again
	controller_unpublish
	delete_volume
}

# ---------------------------------------------------------------------------------------------
# steps: an XFS volume (mkfs.xfs wants at least 300 MB)

POD3=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000004/volumes/kubernetes.io~csi/pvc-xfs/mount
xfs_volume() {
	local sum fsa fsb
	create_volume linux-csi-xfs 320 "$(cap_mount xfs)"
	controller_publish
	node_stage
	TARGET=$POD3
	node_publish "$TARGET"
	head -c $((2 * MIB)) /dev/urandom >"$TARGET/data.bin" && sync
	sum=$(sha256sum <"$TARGET/data.bin")
	fsa=$(fs_bytes "$TARGET")
	csi Controller ControllerExpandVolume "$(req_cexpand $((384 * MIB)))"
	csi Node NodeExpandVolume "$(req_nexpand "$TARGET" $((384 * MIB)))"
	fsb=$(fs_bytes "$TARGET")
	echo "xfs: $fsa -> $fsb bytes"
	((fsb > fsa + 50 * MIB)) || fail "xfs_growfs did not grow the file system ($fsa -> $fsb)"
	node_unpublish "$TARGET"
	node_unstage
	node_stage
	node_publish "$TARGET"
	[[ $(sha256sum <"$TARGET/data.bin") == "$sum" ]] || fail "the xfs volume's file changed across unstage and stage"
	node_unpublish "$TARGET"
	node_unstage
	controller_unpublish
	delete_volume
}

# dhchap_unsupported: on a node whose kernel has no DH-HMAC-CHAP host support, a volume of the
# default auth (dhchap) is refused at NodeStage with a message that says why, and nothing stays
# connected
dhchap_unsupported() {
	local secret
	create_volume linux-csi-dhchap 16 "$(cap_mount ext4)" dhchap
	controller_publish
	secret=${PCTX#*\"dhchapSecret\":\"}
	secret=${secret%%\"*}
	[[ $secret == DHHC-1:* ]] || fail "no secret in the publish context $PCTX"
	csi_refused UNAVAILABLE Node NodeStageVolume "$(req_stage)"
	[[ $RESP == *CONFIG_NVME_AUTH* ]] || fail "the refusal does not say why: $RESP"
	[[ $RESP != *"${secret:10}"* ]] || fail "the refusal shows the secret"
	vol_ctrls
	[[ -z $CTRLS ]] || fail "controllers of $VOL connected: $CTRLS"
	node_unstage
	controller_unpublish
	delete_volume
}

# dhchap_checks: the node's controllers of the volume authenticated with their secrets (both ways),
# and another machine (the host side) presenting this node's NQN without the secret is refused
dhchap_checks() {
	local c n=0 s
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/subsysnqn && $(<"$c/subsysnqn") == "$VOL" ]] || continue
		[[ -r $c/dhchap_secret ]] || fail "${c##*/}: no dhchap_secret in sysfs (kernel without DH-HMAC-CHAP host support?)"
		s=$(<"$c/dhchap_secret")
		[[ $s == DHHC-1:* ]] || fail "${c##*/} connected without a DH-HMAC-CHAP secret ($s)"
		s=$(<"$c/dhchap_ctrl_secret")
		[[ $s == DHHC-1:* ]] || fail "${c##*/} does not check the box (dhchap_ctrl_secret $s)"
		n=$((n + 1))
	done
	((n > 0)) || fail "no controller of $VOL"
	echo "$n controllers of $VOL authenticated with DH-HMAC-CHAP, both directions"
	guest_request impostor "$VOL $NODE_NQN" 60 || fail "the host side connected to $VOL as $NODE_NQN without its secret"
}

nothing_left() {
	csi Controller ListVolumes
	! r_any 'entries.*.volume.volume_id' "$CSI_PREFIX*" || fail "ListVolumes still lists volumes: $RESP"
	csi Controller GetCapacity
	[[ ${R[available_capacity]} == "$CAPACITY0" ]] || fail "GetCapacity ${R[available_capacity]}, $CAPACITY0 at the start"
	ebof_ctl --json show
	flat "$X/ctl.out"
	! r_any 'subsystems.*.nqn' "$CSI_PREFIX*" || fail "subsystems left on the box: $(<"$X/ctl.out")"
	local c left=''
	for c in /sys/class/nvme/nvme*; do [[ -e $c ]] && left+=" ${c##*/}"; done
	[[ -z $left ]] || fail "NVMe controllers left:$left"
	while read -r _ _ _ _ c _; do
		[[ $c == "$KUBELET"/* ]] && left+=" $c"
	done </proc/self/mountinfo
	[[ -z $left ]] || fail "mounts left:$left"
	echo "ListVolumes empty, GetCapacity back to $CAPACITY0, no subsystem on the box, nothing connected or mounted here"
}

stop_driver() {
	local rc=0
	kill -TERM "$DRIVER_PID"
	wait_for 10 driver_gone || fail "ebof csi did not stop on SIGTERM within 10 s"
	wait "$DRIVER_PID" || rc=$?
	((rc == 0)) || fail "ebof csi exited with status $rc on SIGTERM"
	[[ ! -e $SOCK ]] || fail "ebof csi left its socket $SOCK"
	if grep -q -i panicked "$X/csi.log"; then fail "ebof csi panicked: $(grep -i -m3 panicked "$X/csi.log")"; fi
}

# ---------------------------------------------------------------------------------------------
# steps: a replicated volume (`replicas: "2"`, issue 34) survives the loss of one box. The host
# runs two more pool boxes and a witness (linux-csi.sh, REP=1); the driver is started again with
# their boxes file.

REP_TARGET=$KUBELET/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-rep/11111111-aaaa-4bbb-8ccc-000000000005

rep_driver() {
	kill -TERM "$DRIVER_PID"
	wait_for 10 driver_gone || fail "ebof csi did not stop on SIGTERM"
	wait "$DRIVER_PID" || true
	"$EBOF_BIN" csi --endpoint "unix://$SOCK" --controller --boxes "$X/boxes-rep.toml" --node \
		--node-id "$NODE_NQN" >>"$X/csi.log" 2>&1 &
	DRIVER_PID=$!
	echo "ebof csi with the replica boxes: pid $DRIVER_PID"
	wait_for 30 csi_call Identity Probe || fail "ebof csi does not answer Probe: $CODE: $RESP"
}
rep_volume() {
	local req k ip n
	CAP=$CAP_BLOCK
	req=$(printf '{"name": "linux-csi-rep", "capacity_range": {"required_bytes": %s}, "volume_capabilities": [%s], "parameters": {"replicas": "2", "auth": "%s"}}' \
		$((32 * MIB)) "$CAP" "$CSI_AUTH")
	csi Controller CreateVolume "$req"
	VOL=${R[volume.volume_id]} CTX=$(r_object volume.volume_context) PCTX='{}'
	VCTX=()
	for k in "${!R[@]}"; do [[ $k == volume.volume_context.* ]] && VCTX[${k#volume.volume_context.}]=${R[$k]}; done
	echo "volume $VOL, context $CTX"
	for ip in $REP_IPS; do
		[[ ,${VCTX[listeners]}, == *",tcp:$ip:4420,"* ]] || fail "volume_context.listeners lacks tcp:$ip:4420 (a copy's box)"
	done
	STAGE=$PLUGIN_DIR/${VOL##*-}/globalmount
	csi Controller ControllerPublishVolume "$(req_cpub)"
	PCTX=$(r_object publish_context)
	csi Node NodeStageVolume "$(req_stage)"
	vol_ctrls
	n=$(wc -w <<<"$CTRLS")
	((n == 2)) || fail "$n controllers of $VOL after NodeStage ($CTRLS): one per copy expected"
	vol_dev || fail "no block device with UUID ${VCTX[uuid]} after NodeStage"
	csi Node NodePublishVolume "$(req_publish "$REP_TARGET" false)"
	[[ -b $REP_TARGET ]] || fail "$REP_TARGET is not a block device after NodePublish"
	echo "connected to both copies: controllers [$CTRLS], device $DEV"
}
rep_failover() {
	local t0 a b
	head -c $((8 * MIB)) /dev/urandom >/tmp/rep-pattern
	run dd if=/tmp/rep-pattern of="$REP_TARGET" bs=1M oflag=direct conv=fsync status=none
	guest_request csirep "kill-primary $VOL" || fail "the host did not kill the primary's box"
	echo "kill -9 of box $(<"$X/rep-killed") (the primary)"
	t0=$(_us)
	run timeout 90 dd if=/tmp/rep-pattern of="$REP_TARGET" bs=1M seek=8 oflag=direct conv=fsync status=none
	echo "8 MiB more written through the other copy's path $((($(_us) - t0) / 1000)) ms after the kill"
	a=$(sha256sum </tmp/rep-pattern)
	b=$(dd if="$REP_TARGET" bs=1M count=8 iflag=direct status=none | sha256sum)
	[[ $a == "$b" ]] || fail "the data written before the kill reads back as $b, not $a"
	b=$(dd if="$REP_TARGET" bs=1M skip=8 count=8 iflag=direct status=none | sha256sum)
	[[ $a == "$b" ]] || fail "the data written after the kill reads back as $b, not $a"
	echo "16 MiB read back from the surviving copy: ${a%% *} twice"
}
rep_condition() {
	csi Controller ControllerGetVolume "$(req_vol)"
	[[ ${R[status.volume_condition.abnormal]:-} == true ]] ||
		fail "ControllerGetVolume: not abnormal with a copy's box dead: $RESP"
	echo "ControllerGetVolume: abnormal: ${R[status.volume_condition.message]}"
	if csi_call Controller ListVolumes; then
		r_any 'entries.*.status.volume_condition.abnormal' true || fail "ListVolumes: not abnormal: $RESP"
	else
		[[ $CODE == UNAVAILABLE ]] || fail "ListVolumes failed with $CODE: $RESP"
		echo "ListVolumes: UNAVAILABLE while a box does not answer (its volumes would be missing)"
	fi
}
rep_cleanup() {
	node_unpublish "$REP_TARGET"
	csi Node NodeUnstageVolume "$(req_unstage)"
	vol_ctrls
	[[ -z $CTRLS ]] || fail "controllers of $VOL left after NodeUnstage: $CTRLS"
}

# ---------------------------------------------------------------------------------------------

step "start ebof csi --controller --node (boxes: the host's box)" start_driver
step "Identity, capabilities, NodeGetInfo, GetCapacity" identity
step "Identity and GetCapacity through Debian's python3-grpcio as well" debian_client
if [[ $CSI_AUTH != dhchap ]]; then
	step "auth dhchap on a kernel without it: NodeStage refused, saying why" dhchap_unsupported
fi
step "ext4 64 MiB ($CSI_AUTH): CreateVolume (twice: one volume)" create_volume linux-csi-ext4 64 "$(cap_mount ext4)"
step "ext4: NodeStage before ControllerPublish is refused" stage_refused_before_publish
step "ext4: ControllerPublish (twice; the box allows this node only)" controller_publish
TARGET=$POD1
step "ext4: Node refusals (publish before stage, missing fields, unknown paths)" node_refusals
step "ext4: NodeStage (connect, mkfs, mount)" node_stage
if [[ $CSI_AUTH == dhchap ]]; then
	step "ext4: the node authenticated (DH-HMAC-CHAP both ways); its NQN alone is refused" dhchap_checks
fi
step "ext4: NodePublish (bind mount)" node_publish "$TARGET"
step "ext4: write files + sync" write_files
step "ext4: NodeGetVolumeStats" volume_stats
step "ext4: NodeUnpublish (twice)" node_unpublish "$TARGET"
step "ext4: NodeUnstage (umount, disconnect; again: OK)" node_unstage again
step "ext4: NodeStage + NodePublish again (each twice): the files are there" stage_publish_again
step "ext4: a half-done stage (a path and the mount gone) is finished by NodeStage" half_done_stage
step "ebof csi killed (SIGKILL) and started again" restart_driver
step "ext4: after the restart NodeStage + NodePublish (each twice) change nothing" after_restart
step "ext4: ControllerExpand + NodeExpand to 128 MiB, no reconnect" expand
step "ext4: read-only NodePublish refuses writes (EROFS)" readonly_publish
step "ext4: NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume" ext4_cleanup
step "block 32 MiB: CreateVolume" create_volume linux-csi-block 32 "$CAP_BLOCK"
step "block: ControllerPublish" controller_publish
step "block: NodeStage (twice) + NodePublish on a file (twice)" block_stage_publish
step "block: O_DIRECT pattern written and read back, stats" block_io
step "block: ControllerExpand to 48 MiB (seen without a node step), NodeExpand OK" block_expand
step "block: NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume" block_cleanup
if [[ ${CSI_XFS:-1} != 0 ]]; then
	step "xfs 320 MiB: create, publish, stage, expand to 384 MiB, restage, delete" xfs_volume
fi
step "nothing left: ListVolumes, GetCapacity, the box, this node" nothing_left
if [[ ${REP:-0} == 1 ]]; then
	step "replicas 2: ebof csi again with the replica boxes (R1, R2, witness)" rep_driver
	step "replicas 2: CreateVolume, ControllerPublish, NodeStage (both copies), NodePublish" rep_volume
	step "replicas 2: write, kill -9 the primary's box, write and read back through the other" rep_failover
	step "replicas 2: ControllerGetVolume and ListVolumes say it is degraded" rep_condition
	step "replicas 2: NodeUnpublish, NodeUnstage" rep_cleanup
fi
step "ebof csi stops on SIGTERM" stop_driver
