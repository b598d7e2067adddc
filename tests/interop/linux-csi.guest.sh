#!/bin/bash
# Guest half of linux-csi.sh: `ebof csi --controller --node` in the guest, driven step by step
# through the CSI client (/xchg/csi_client.py, one long-lived process: `serve` mode, one request
# a line) as a container orchestrator would: CreateVolume, ControllerPublish (the box allows this
# node's host NQN), NodeStage (nvme connect, mkfs, mount), NodePublish (bind mount), I/O, stats,
# NodeUnpublish, NodeUnstage (umount, disconnect), stage again (the data is there), expansion
# without reconnecting, a read-only publish, a raw block volume, an XFS volume, idempotent repeats,
# and at the end nothing left on the box. The box's own view (`ebof ctl --json show`, for the
# host ACL) comes from the host (guest_request ctl).
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

MIB=1048576
CSI_PREFIX=${CSI_PREFIX:-nqn.2026-11.io.ebof:csi:}
SOCK=/run/csi/csi.sock
export CSI_ENDPOINT=unix://$SOCK CSI_PB_DIR=$X CSI_TIMEOUT=150
DRIVER=csi.ebof.io
KUBELET=/var/lib/kubelet
PLUGIN_DIR=$KUBELET/plugins/kubernetes.io/csi/$DRIVER
DRIVER_PID='' NODE_NQN='' CAPACITY0=''
# the volume being worked on: ID, capability, volume context, publish context (JSON), paths
VOL='' CAP='' CTX='' PCTX='{}' STAGE='' TARGET=''
CODE='' RESP='' CTL_OUT=''

# ---------------------------------------------------------------------------------------------
# helpers

# csi_call SERVICE METHOD [JSON]: one CSI call through the client; CODE is OK or the gRPC status
# code name, RESP the response JSON (or the error's details); returns 1 unless OK
csi_call() {
	local req=${3:-} line t0
	[[ -n $req ]] || req='{}'
	echo "+ csi $1.$2 $req" >&2
	t0=$(_us)
	printf '%s %s %s\n' "$1" "$2" "$req" >&"${CSI[1]}"
	read -r -t 200 line <&"${CSI[0]}" || fail "no answer from the CSI client to $1.$2 within 200 s"
	CODE=${line%% *} line=${line#* }
	if [[ $CODE == ERR ]]; then
		CODE=${line%% *} RESP=$(jq -r . <<<"${line#* }")
	else
		RESP=$line
	fi
	echo "  -> $CODE in $(_secs $(($(_us) - t0))) s: ${RESP:0:600}" >&2
	if [[ $CODE != OK ]] && driver_gone; then
		tail -n 30 "$X/csi.log"
		fail "ebof csi (pid $DRIVER_PID) is not running any more"
	fi
	[[ $CODE == OK ]]
}
# csi SERVICE METHOD [JSON]: the call must succeed
csi() { csi_call "$@" || fail "$1.$2 failed: $CODE: $RESP"; }
# csi_refused CODE SERVICE METHOD [JSON]: the call must fail (with CODE unless CODE is ANY)
csi_refused() {
	local want=$1
	shift
	if csi_call "$@"; then fail "$1.$2 succeeded; it must fail${want:+ ($want)}"; fi
	[[ $want == ANY || $CODE == "$want" ]] || fail "$1.$2 failed with $CODE; expected $want"
	echo "refused as expected: $CODE: $RESP"
}
# driver_gone: the driver exited (gone, or a zombie not reaped yet)
driver_gone() { [[ ! -e /proc/$DRIVER_PID || $(awk '{ print $3 }' "/proc/$DRIVER_PID/stat" 2>/dev/null) == Z ]]; }
# _sock_up: the driver's socket is there, or the driver is gone (no point waiting)
_sock_up() { [[ -S $SOCK ]] || driver_gone; }
# jr FILTER: jq -r FILTER on $RESP
jr() { jq -r "$@" <<<"$RESP"; }

cap_mount() { jq -nc --arg fs "$1" --arg m "${2:-SINGLE_NODE_WRITER}" '{mount: {fs_type: $fs}, access_mode: {mode: $m}}'; }
cap_block() { jq -nc --arg m "$1" '{block: {}, access_mode: {mode: $m}}'; }

# ebof_ctl ARGS...: `ebof ctl ARGS` on the host against the box; CTL_OUT is its stdout
ebof_ctl() {
	local rc=0
	guest_request ctl "$*" 60 >&2 || rc=$?
	CTL_OUT=$(<"$X/ctl.out")
	((rc == 0)) || { cat "$X/ctl.err"; fail "ebof ctl $* failed (status $rc)"; }
}
# box_hosts NQN: "ALLOW_ANY_HOST HOST..." of subsystem NQN on the box
box_hosts() {
	ebof_ctl --json show
	jq -r --arg n "$1" '.subsystems[] | select(.nqn == $n) | "\(.allow_any_host) \(.hosts | join(" "))"' <<<"$CTL_OUT"
}

# the volume's state on this node
vol_ctrls() { # controllers of the volume's subsystem, sorted
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/subsysnqn && $(<"$c/subsysnqn") == "$VOL" ]] && echo "${c##*/}:$(<"$c/cntlid")"
	done | sort | xargs
}
vol_dev() { # the volume's block device (found by its UUID, as the driver does)
	local b want
	want=$(jq -r .uuid <<<"$CTX")
	for b in /sys/block/nvme*n*; do
		[[ ${b##*/} == nvme*c*n* || ! -r $b/uuid ]] && continue
		[[ $(<"$b/uuid") == "$want" ]] && { echo "/dev/${b##*/}"; return 0; }
	done
	return 1
}
_no_vol_ctrl() { [[ -z $(vol_ctrls) ]]; }
is_mounted() { mountpoint -q "$1"; }
mount_opts() { findmnt -n -o OPTIONS --target "$1" | cut -d, -f1; }

# requests for the current volume
req_stage() {
	jq -nc --arg v "$VOL" --arg s "$STAGE" --argjson cap "$CAP" --argjson ctx "$CTX" --argjson pc "$PCTX" \
		'{volume_id: $v, staging_target_path: $s, volume_capability: $cap, volume_context: $ctx, publish_context: $pc}'
}
req_publish() { # req_publish TARGET READONLY(true|false)
	jq -nc --arg v "$VOL" --arg s "$STAGE" --arg t "$1" --argjson ro "$2" --argjson cap "$CAP" \
		--argjson ctx "$CTX" --argjson pc "$PCTX" \
		'{volume_id: $v, staging_target_path: $s, target_path: $t, readonly: $ro, volume_capability: $cap,
		  volume_context: $ctx, publish_context: $pc}'
}
req_unpublish() { jq -nc --arg v "$VOL" --arg t "$1" '{volume_id: $v, target_path: $t}'; }
req_unstage() { jq -nc --arg v "$VOL" --arg s "$STAGE" '{volume_id: $v, staging_target_path: $s}'; }

# ---------------------------------------------------------------------------------------------
# steps: the driver

start_driver() {
	[[ -n ${EBOF_BIN:-} ]] || fail "the host shared no ebof binary"
	NODE_NQN=$(nvme gen-hostnqn)
	echo "node ID (host NQN): $NODE_NQN"
	mkdir -p "${SOCK%/*}"
	"$EBOF_BIN" csi --endpoint "unix://$SOCK" --controller --boxes "$X/boxes.toml" --node \
		--node-id "$NODE_NQN" >"$X/csi.log" 2>&1 &
	DRIVER_PID=$!
	echo "ebof csi: pid $DRIVER_PID"
	wait_for 30 _sock_up || { cat "$X/csi.log"; fail "ebof csi did not bind $SOCK within 30 s"; }
	[[ -S $SOCK ]] || { cat "$X/csi.log"; fail "ebof csi exited before serving"; }
	# the client: one process for every call (coproc: CSI[0] its output, CSI[1] its input)
	coproc CSI { exec /usr/bin/python3 "$X/csi_client.py" serve 2>>"$X/csi-client.err"; }
	echo "CSI client: pid $CSI_PID"
}

identity() {
	csi Identity GetPluginInfo
	[[ $(jr .name) == "$DRIVER" ]] || fail "GetPluginInfo name is $(jr .name), not $DRIVER"
	[[ -n $(jr .vendor_version) ]] || fail "GetPluginInfo has no vendor_version"
	csi Identity Probe
	[[ $(jr '.ready // true') == true ]] || fail "Probe says not ready"
	csi Identity GetPluginCapabilities
	jr '.capabilities[].service.type // empty' | grep -qx CONTROLLER_SERVICE ||
		fail "GetPluginCapabilities does not advertise CONTROLLER_SERVICE"
	csi Node NodeGetInfo
	[[ $(jr .node_id) == "$NODE_NQN" ]] || fail "NodeGetInfo node_id $(jr .node_id), expected $NODE_NQN"
	csi Node NodeGetCapabilities
	local c
	for c in STAGE_UNSTAGE_VOLUME EXPAND_VOLUME GET_VOLUME_STATS; do
		jr '.capabilities[].rpc.type' | grep -qx "$c" || fail "NodeGetCapabilities lacks $c"
	done
	csi Controller ControllerGetCapabilities
	for c in CREATE_DELETE_VOLUME PUBLISH_UNPUBLISH_VOLUME EXPAND_VOLUME LIST_VOLUMES GET_CAPACITY; do
		jr '.capabilities[].rpc.type' | grep -qx "$c" || fail "ControllerGetCapabilities lacks $c"
	done
	csi Controller GetCapacity
	CAPACITY0=$(jr '.available_capacity | tonumber')
	echo "GetCapacity: $CAPACITY0 bytes available"
	((CAPACITY0 > 512 * MIB)) || fail "GetCapacity $CAPACITY0: the box's 1 GiB pool is not seen"
}

# create_volume NAME SIZE_MIB CAP: CreateVolume (twice: idempotent by name); sets VOL, CAP, CTX
create_volume() {
	local name=$1 size=$(($2 * MIB)) req vol2
	CAP=$3
	req=$(jq -nc --arg n "$name" --argjson b "$size" --argjson cap "$CAP" \
		'{name: $n, capacity_range: {required_bytes: $b}, volume_capabilities: [$cap]}')
	csi Controller CreateVolume "$req"
	VOL=$(jr .volume.volume_id) CTX=$(jr -c .volume.volume_context) PCTX='{}'
	echo "volume $VOL, context $CTX, $(jr .volume.capacity_bytes) bytes"
	[[ $VOL == "$CSI_PREFIX"* ]] || fail "volume ID $VOL does not start with $CSI_PREFIX"
	(($(jr '.volume.capacity_bytes | tonumber') >= size)) || fail "capacity_bytes $(jr .volume.capacity_bytes) < $size"
	[[ $(jq -r .nqn <<<"$CTX") == "$VOL" ]] || fail "volume_context.nqn is not the volume ID"
	[[ $(jq -r .uuid <<<"$CTX") =~ ^[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$ ]] || fail "volume_context.uuid is not a UUID"
	[[ ,$(jq -r .listeners <<<"$CTX"), == *",tcp:$TARGET_IP:$TARGET_PORT,"* ]] ||
		fail "volume_context.listeners lacks tcp:$TARGET_IP:$TARGET_PORT"
	[[ -n $(jq -r '.box // empty' <<<"$CTX") ]] || fail "volume_context has no box"
	csi Controller CreateVolume "$req"
	vol2=$(jr .volume.volume_id)
	[[ $vol2 == "$VOL" ]] || fail "CreateVolume again for $name made $vol2, not $VOL"
	csi Controller GetCapacity
	(($(jr '.available_capacity | tonumber') < CAPACITY0)) || fail "GetCapacity did not fall ($(jr .available_capacity))"
	# the paths a kubelet would use
	STAGE=$PLUGIN_DIR/$(sha256sum <<<"$VOL" | cut -c1-16)/globalmount
}

stage_refused_before_publish() {
	csi_refused ANY Node NodeStageVolume "$(req_stage)"
	[[ -z $(vol_ctrls) ]] || fail "a controller of $VOL is connected although the box does not allow $NODE_NQN"
	! is_mounted "$STAGE" || fail "$STAGE is mounted after a failed NodeStage"
}

controller_publish() {
	local req acl
	req=$(jq -nc --arg v "$VOL" --arg n "$NODE_NQN" --argjson cap "$CAP" --argjson ctx "$CTX" \
		'{volume_id: $v, node_id: $n, volume_capability: $cap, readonly: false, volume_context: $ctx}')
	csi Controller ControllerPublishVolume "$req"
	PCTX=$(jr -c '.publish_context // {}')
	csi Controller ControllerPublishVolume "$req" # idempotent
	acl=$(box_hosts "$VOL")
	echo "box: subsystem $VOL allow_any_host/hosts: $acl"
	[[ $acl == "false "* && " $acl " == *" $NODE_NQN "* ]] || fail "the box does not allow just $NODE_NQN on $VOL: $acl"
}

controller_unpublish() {
	local req acl
	req=$(jq -nc --arg v "$VOL" --arg n "$NODE_NQN" '{volume_id: $v, node_id: $n}')
	csi Controller ControllerUnpublishVolume "$req"
	csi Controller ControllerUnpublishVolume "$req" # idempotent
	acl=$(box_hosts "$VOL")
	echo "box: subsystem $VOL allow_any_host/hosts: $acl"
	[[ " $acl " != *" $NODE_NQN "* ]] || fail "the box still allows $NODE_NQN on $VOL"
}

delete_volume() {
	local req
	req=$(jq -nc --arg v "$VOL" '{volume_id: $v}')
	csi Controller DeleteVolume "$req"
	csi Controller DeleteVolume "$req" # an unknown volume: OK
	ebof_ctl --json show
	[[ -z $(jq -r --arg n "$VOL" '.subsystems[] | select(.nqn == $n) | .nqn' <<<"$CTL_OUT") ]] ||
		fail "$VOL is still on the box after DeleteVolume"
}

# node_stage [again]: NodeStageVolume; checks the connection, the device and (mount) the mount
node_stage() {
	local dev ctrls
	csi Node NodeStageVolume "$(req_stage)"
	ctrls=$(vol_ctrls)
	[[ -n $ctrls ]] || fail "no NVMe controller of $VOL after NodeStage"
	dev=$(vol_dev) || fail "no block device with UUID $(jq -r .uuid <<<"$CTX") after NodeStage"
	echo "connected: controllers [$ctrls], device $dev ($(blockdev --getsize64 "$dev") bytes)"
	if [[ $(jq -r 'has("mount")' <<<"$CAP") == true ]]; then
		is_mounted "$STAGE" || fail "$STAGE is not mounted after NodeStage"
		findmnt -n -o SOURCE,FSTYPE,OPTIONS --target "$STAGE"
		[[ $(findmnt -n -o FSTYPE --target "$STAGE") == "$(jq -r .mount.fs_type <<<"$CAP")" ]] ||
			fail "$STAGE is not $(jq -r .mount.fs_type <<<"$CAP")"
		[[ $(findmnt -n -o SOURCE --target "$STAGE") == "$dev" ]] || fail "$STAGE is not $dev"
	fi
	if [[ ${1:-} == again ]]; then # a repeated NodeStage: OK, nothing new
		csi Node NodeStageVolume "$(req_stage)"
		[[ $(vol_ctrls) == "$ctrls" ]] || fail "a repeated NodeStage changed the controllers: [$ctrls] -> [$(vol_ctrls)]"
		(($(grep -c " $STAGE " /proc/self/mountinfo) <= 1)) || fail "a repeated NodeStage mounted $STAGE twice"
	fi
}

node_unstage() {
	csi Node NodeUnstageVolume "$(req_unstage)"
	! is_mounted "$STAGE" || fail "$STAGE is still mounted after NodeUnstage"
	_no_vol_ctrl || fail "controllers of $VOL remain after NodeUnstage: $(vol_ctrls)"
	! vol_dev >/dev/null || fail "the block device of $VOL remains after NodeUnstage"
	echo "unstaged: no controller of $VOL, $STAGE not mounted"
	if [[ ${1:-} == again ]]; then
		csi Node NodeUnstageVolume "$(req_unstage)" # already unstaged: OK
	fi
}

# node_publish TARGET [ro] [again]
node_publish() {
	local t=$1 ro=false
	[[ ${2:-} == ro ]] && ro=true
	csi Node NodePublishVolume "$(req_publish "$t" "$ro")"
	is_mounted "$t" || fail "$t is not a mount point after NodePublish"
	findmnt -n -o SOURCE,FSTYPE,OPTIONS --target "$t"
	local opt
	opt=$(mount_opts "$t")
	[[ $opt == "$([[ $ro == true ]] && echo ro || echo rw)" ]] || fail "$t is mounted $opt, readonly=$ro asked"
	if [[ ${3:-} == again ]]; then
		csi Node NodePublishVolume "$(req_publish "$t" "$ro")"
		(($(grep -c " $t " /proc/self/mountinfo) == 1)) || fail "a repeated NodePublish mounted $t twice"
	fi
}

node_unpublish() {
	csi Node NodeUnpublishVolume "$(req_unpublish "$1")"
	! is_mounted "$1" || fail "$1 is still mounted after NodeUnpublish"
	csi Node NodeUnpublishVolume "$(req_unpublish "$1")" # again: OK
}

# ---------------------------------------------------------------------------------------------
# steps: a mount volume (ext4)

EXT4_SUM='' CTRL_BEFORE='' DF_BEFORE=''
POD1=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000001/volumes/kubernetes.io~csi/pvc-ext4/mount
POD2=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000002/volumes/kubernetes.io~csi/pvc-ext4/mount

ext4_create() { create_volume linux-csi-ext4 64 "$(cap_mount ext4)"; }
write_files() {
	head -c $((4 * MIB)) /dev/urandom >"$TARGET/data.bin"
	printf 'written through %s on %s\n' "$VOL" "$NODE_NQN" >"$TARGET/hello.txt"
	sync -f "$TARGET/data.bin"
	sync
	EXT4_SUM=$(cd "$TARGET" && sha256sum data.bin hello.txt)
	echo "$EXT4_SUM"
}
volume_stats() {
	csi Node NodeGetVolumeStats "$(jq -nc --arg v "$VOL" --arg p "$TARGET" '{volume_id: $v, volume_path: $p}')"
	local used total
	used=$(jr '.usage[] | select(.unit == "BYTES") | .used | tonumber')
	total=$(jr '.usage[] | select(.unit == "BYTES") | .total | tonumber')
	echo "bytes: used $used of $total"
	((used >= 4 * MIB)) || fail "NodeGetVolumeStats used $used < the 4 MiB written"
	((total > 40 * MIB && total <= 64 * MIB)) || fail "NodeGetVolumeStats total $total is not a 64 MiB file system's"
	[[ -n $(jr '.usage[] | select(.unit == "INODES") | .used') ]] || fail "no inode usage"
}
files_are_there() {
	local sum
	sum=$(cd "$1" && sha256sum data.bin hello.txt) || fail "the files are not in $1"
	[[ $sum == "$EXT4_SUM" ]] || fail "the files in $1 differ: $sum"
	echo "same content in $1"
}
stage_publish_again() {
	node_stage again
	node_publish "$TARGET" rw again
	files_are_there "$TARGET"
	CTRL_BEFORE=$(vol_ctrls)
	DF_BEFORE=$(df -B1 --output=size "$TARGET" | tail -n1 | tr -d ' ')
	echo "controllers [$CTRL_BEFORE], file system $DF_BEFORE bytes"
}
expand() {
	local req dev size
	req=$(jq -nc --arg v "$VOL" --argjson b $((128 * MIB)) --argjson cap "$CAP" \
		'{volume_id: $v, capacity_range: {required_bytes: $b}, volume_capability: $cap}')
	csi Controller ControllerExpandVolume "$req"
	(($(jr '.capacity_bytes | tonumber') >= 128 * MIB)) || fail "ControllerExpandVolume capacity $(jr .capacity_bytes)"
	[[ $(jr .node_expansion_required) == true ]] || fail "a mount volume needs node expansion"
	csi Node NodeExpandVolume "$(jq -nc --arg v "$VOL" --arg p "$TARGET" --arg s "$STAGE" --argjson b $((128 * MIB)) \
		--argjson cap "$CAP" '{volume_id: $v, volume_path: $p, staging_target_path: $s,
		capacity_range: {required_bytes: $b}, volume_capability: $cap}')"
	(($(jr '.capacity_bytes | tonumber') >= 128 * MIB)) || fail "NodeExpandVolume capacity $(jr .capacity_bytes)"
	dev=$(vol_dev)
	size=$(blockdev --getsize64 "$dev")
	local df_after
	df_after=$(df -B1 --output=size "$TARGET" | tail -n1 | tr -d ' ')
	df -h "$TARGET"
	echo "device $dev $size bytes; file system $DF_BEFORE -> $df_after bytes; controllers [$CTRL_BEFORE] -> [$(vol_ctrls)]"
	((size == 128 * MIB)) || fail "$dev is $size bytes, not 128 MiB"
	((df_after > DF_BEFORE + 50 * MIB)) || fail "the file system did not grow ($DF_BEFORE -> $df_after bytes)"
	[[ $(vol_ctrls) == "$CTRL_BEFORE" ]] || fail "the controllers changed (a reconnect?): [$CTRL_BEFORE] -> [$(vol_ctrls)]"
	files_are_there "$TARGET"
	# the grown file system takes more than the old size
	run fallocate -l $((72 * MIB)) "$TARGET/big.bin" || fail "cannot allocate 72 MiB in the grown file system"
	rm -f "$TARGET/big.bin"
}
readonly_publish() {
	local err
	node_publish "$POD2" ro
	files_are_there "$POD2"
	if err=$(touch "$POD2/nope" 2>&1); then fail "writing into the read-only publish $POD2 succeeded"; fi
	echo "touch: $err"
	[[ $err == *"Read-only file system"* ]] || fail "the write failed, but not with EROFS: $err"
	# the read-write publish still writes
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

block_create() { create_volume linux-csi-block 32 "$(cap_block SINGLE_NODE_WRITER)"; }
block_stage_publish() {
	node_stage again
	csi Node NodePublishVolume "$(req_publish "$BLK_TARGET" false)"
	[[ -b $BLK_TARGET ]] || fail "$BLK_TARGET is not a block device after NodePublish"
	is_mounted "$BLK_TARGET" || fail "$BLK_TARGET is not a bind mount"
	local devno want
	devno=$(stat -L -c '%t:%T' "$BLK_TARGET") want=$(stat -L -c '%t:%T' "$(vol_dev)")
	[[ $devno == "$want" ]] || fail "$BLK_TARGET is device $devno, the volume is $want"
	echo "$BLK_TARGET: the volume's device ($(vol_dev), $devno)"
	csi Node NodePublishVolume "$(req_publish "$BLK_TARGET" false)" # again: OK
}
block_io() {
	local a b
	head -c $((8 * MIB)) /dev/urandom >/tmp/pattern
	run dd if=/tmp/pattern of="$BLK_TARGET" bs=1M oflag=direct conv=fsync status=none
	run dd if=/dev/zero of="$BLK_TARGET" bs=1M count=1 seek=31 oflag=direct status=none # the last MiB
	a=$(sha256sum </tmp/pattern | cut -d' ' -f1)
	b=$(dd if="$BLK_TARGET" bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1)
	[[ $a == "$b" ]] || fail "read back $b, wrote $a"
	echo "8 MiB pattern written with O_DIRECT and read back: $a"
	csi Node NodeGetVolumeStats "$(jq -nc --arg v "$VOL" --arg p "$BLK_TARGET" '{volume_id: $v, volume_path: $p}')"
	(($(jr '.usage[0].total | tonumber') == 32 * MIB)) || fail "NodeGetVolumeStats total of the block volume: $(jr .usage[0].total)"
}
block_cleanup() {
	csi Node NodeUnpublishVolume "$(req_unpublish "$BLK_TARGET")"
	! is_mounted "$BLK_TARGET" || fail "$BLK_TARGET is still mounted"
	node_unstage again
	controller_unpublish
	delete_volume
}

# ---------------------------------------------------------------------------------------------
# steps: an XFS volume (mkfs.xfs wants at least 300 MB)

POD3=$KUBELET/pods/11111111-aaaa-4bbb-8ccc-000000000004/volumes/kubernetes.io~csi/pvc-xfs/mount
xfs_volume() {
	local sum dfa dfb
	create_volume linux-csi-xfs 320 "$(cap_mount xfs)"
	controller_publish
	node_stage
	TARGET=$POD3
	node_publish "$TARGET"
	head -c $((2 * MIB)) /dev/urandom >"$TARGET/data.bin" && sync
	sum=$(sha256sum <"$TARGET/data.bin")
	dfa=$(df -B1 --output=size "$TARGET" | tail -n1 | tr -d ' ')
	csi Controller ControllerExpandVolume "$(jq -nc --arg v "$VOL" --argjson b $((384 * MIB)) --argjson cap "$CAP" \
		'{volume_id: $v, capacity_range: {required_bytes: $b}, volume_capability: $cap}')"
	csi Node NodeExpandVolume "$(jq -nc --arg v "$VOL" --arg p "$TARGET" --argjson b $((384 * MIB)) --argjson cap "$CAP" \
		'{volume_id: $v, volume_path: $p, capacity_range: {required_bytes: $b}, volume_capability: $cap}')"
	dfb=$(df -B1 --output=size "$TARGET" | tail -n1 | tr -d ' ')
	echo "xfs: $dfa -> $dfb bytes"
	((dfb > dfa + 50 * MIB)) || fail "xfs_growfs did not grow the file system ($dfa -> $dfb)"
	node_unpublish "$TARGET"
	node_unstage
	node_stage
	node_publish "$TARGET"
	[[ $(sha256sum <"$TARGET/data.bin") == "$sum" ]] || fail "the xfs volume's file changed across unstage/stage"
	node_unpublish "$TARGET"
	node_unstage
	controller_unpublish
	delete_volume
}

nothing_left() {
	csi Controller ListVolumes
	local left
	# shellcheck disable=SC2016 # $p is jq's
	left=$(jr --arg p "$CSI_PREFIX" '[.entries[]?.volume.volume_id | select(startswith($p))] | join(" ")')
	[[ -z $left ]] || fail "ListVolumes still lists: $left"
	csi Controller GetCapacity
	[[ $(jr '.available_capacity | tonumber') == "$CAPACITY0" ]] ||
		fail "GetCapacity $(jr .available_capacity), $CAPACITY0 at the start"
	ebof_ctl --json show
	left=$(jq -r --arg p "$CSI_PREFIX" '[.subsystems[].nqn | select(startswith($p))] | join(" ")' <<<"$CTL_OUT")
	[[ -z $left ]] || fail "subsystems left on the box: $left"
	[[ -z $(ls /sys/class/nvme/ 2>/dev/null) ]] || fail "NVMe controllers left: $(ls /sys/class/nvme/)"
	grep -q " $KUBELET" /proc/self/mountinfo && fail "mounts left under $KUBELET: $(grep " $KUBELET" /proc/self/mountinfo)"
	echo "ListVolumes empty, GetCapacity back to $CAPACITY0, no subsystem on the box, nothing connected or mounted"
}

stop_driver() {
	local rc=0
	kill -TERM "$DRIVER_PID"
	wait_for 10 driver_gone || fail "ebof csi did not stop on SIGTERM within 10 s"
	wait "$DRIVER_PID" || rc=$?
	((rc == 0)) || fail "ebof csi exited with status $rc on SIGTERM"
	[[ ! -e $SOCK ]] || fail "ebof csi left its socket $SOCK"
	! grep -q -i panick "$X/csi.log" || fail "ebof csi panicked: $(grep -i -m3 panick "$X/csi.log")"
}

# ---------------------------------------------------------------------------------------------

step "start ebof csi --controller --node (boxes: the host's box)" start_driver
step "Identity, capabilities, NodeGetInfo, GetCapacity" identity
step "ext4 64 MiB: CreateVolume (twice: one volume)" ext4_create
step "ext4: NodeStage before ControllerPublish is refused" stage_refused_before_publish
step "ext4: ControllerPublish (the box allows this node only)" controller_publish
TARGET=$POD1
step "ext4: NodeStage (connect, mkfs, mount)" node_stage
step "ext4: NodePublish (bind mount)" node_publish "$TARGET"
step "ext4: write files + sync" write_files
step "ext4: NodeGetVolumeStats" volume_stats
step "ext4: NodeUnpublish" node_unpublish "$TARGET"
step "ext4: NodeUnstage (umount, disconnect; again: OK)" node_unstage again
step "ext4: NodeStage + NodePublish again (each twice): the files are there" stage_publish_again
step "ext4: ControllerExpand + NodeExpand to 128 MiB, no reconnect" expand
step "ext4: read-only NodePublish refuses writes (EROFS)" readonly_publish
step "ext4: NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume" ext4_cleanup
step "block 32 MiB: CreateVolume" block_create
step "block: ControllerPublish" controller_publish
step "block: NodeStage (twice) + NodePublish on a file (twice)" block_stage_publish
step "block: O_DIRECT pattern written and read back" block_io
step "block: NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume" block_cleanup
if [[ ${CSI_XFS:-1} != 0 ]]; then
	step "xfs 320 MiB: create, publish, stage, expand to 384 MiB, restage, delete" xfs_volume
fi
step "nothing left: ListVolumes, GetCapacity, the box, this node" nothing_left
step "ebof csi stops on SIGTERM" stop_driver
