#!/bin/bash
# Guest half of linux-csi-auth.sh (trixie guest: Linux 6.12 with DH-HMAC-CHAP host support):
# `ebof csi --node` here, reached by the host's CSI client through a TCP forwarder (python3 from the
# standard library: the trixie root has no gRPC for Python); the host drives the CSI calls
# (guest_request stage/unstage/delete), this side checks what the kernel did.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

SOCK=/run/csi/csi.sock
NODE_NQN='' DRIVER_PID='' FWD_PID='' VOL=''

start_node() {
	local u
	[[ -n ${EBOF_BIN:-} ]] || fail "the host shared no ebof binary"
	read -r u </proc/sys/kernel/random/uuid
	NODE_NQN=nqn.2014-08.org.nvmexpress:uuid:$u
	mkdir -p "${SOCK%/*}"
	"$EBOF_BIN" csi --endpoint "unix://$SOCK" --node --node-id "$NODE_NQN" >"$X/csi.log" 2>&1 &
	DRIVER_PID=$!
	wait_for 30 test -S "$SOCK" || { cat "$X/csi.log"; fail "ebof csi --node did not bind $SOCK"; }
	cat >/tmp/fwd.py <<'EOF'
import socket, sys, threading
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
srv = socket.create_server(("0.0.0.0", int(sys.argv[2])))
while True:
    c, _ = srv.accept()
    u = socket.socket(socket.AF_UNIX)
    u.connect(sys.argv[1])
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
EOF
	python3 /tmp/fwd.py "$SOCK" "$NODE_PORT" &
	FWD_PID=$!
	echo "node $NODE_NQN: ebof csi --node pid $DRIVER_PID, forwarder :$NODE_PORT pid $FWD_PID"
}

# the volume's controllers here: "nvmeN ..." (none: empty)
ctrls_of() {
	local c out=''
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/subsysnqn && $(<"$c/subsysnqn") == "$1" ]] && out+=" ${c##*/}"
	done
	echo "${out# }"
}

stage() {
	local c n=0 s
	guest_request stage "$NODE_NQN" 120 || fail "the host's stage (create, publish, NodeStage, impostor) failed"
	VOL=$(<"$X/vol")
	for c in $(ctrls_of "$VOL"); do
		s=$(</sys/class/nvme/"$c"/dhchap_secret)
		[[ $s == DHHC-1:* ]] || fail "$c connected without a DH-HMAC-CHAP secret ($s)"
		s=$(</sys/class/nvme/"$c"/dhchap_ctrl_secret)
		[[ $s == DHHC-1:* ]] || fail "$c does not check the box (dhchap_ctrl_secret $s)"
		n=$((n + 1))
	done
	((n > 0)) || fail "no controller of $VOL after NodeStage"
	# informative: who may read the secret the kernel keeps (the ADR quotes this)
	echo "sysfs modes: dhchap_secret $(stat -c %A /sys/class/nvme/"$c"/dhchap_secret), dhchap_ctrl_secret $(stat -c %A /sys/class/nvme/"$c"/dhchap_ctrl_secret)"
	grep -q " $STAGE ext4 " /proc/mounts || fail "$STAGE is not an ext4 mount"
	echo data >"$STAGE/f" && sync
	echo "$n controller(s) of $VOL authenticated both ways; $STAGE mounted"
}

unstage() {
	guest_request unstage "" 120 || fail "the host's NodeUnstage failed"
	[[ -z $(ctrls_of "$VOL") ]] || fail "controllers of $VOL remain: $(ctrls_of "$VOL")"
	! grep -q " $STAGE " /proc/mounts || fail "$STAGE is still mounted"
}

# the node's NQN, still published (allowed on the box), without the secret: refused
impostor_here() {
	if run -t 60 nvme connect -t tcp -a "$TARGET_IP" -s "$TARGET_PORT" -n "$VOL" --hostnqn "$NODE_NQN"; then
		fail "connected to $VOL as $NODE_NQN without the secret"
	fi
	[[ -z $(ctrls_of "$VOL") ]] || fail "controllers of $VOL: $(ctrls_of "$VOL")"
	dmesg | tail -n 3
	echo "refused as it must be"
}

unpublish() {
	guest_request unpublish "" 120 || fail "the host's ControllerUnpublish failed"
	# unpublished: the secret the node had opens nothing any more
	echo "+ nvme connect -t tcp -a $TARGET_IP -s $TARGET_PORT -n $VOL --hostnqn $NODE_NQN --dhchap-secret=<the node's>"
	if timeout -k 5 60 nvme connect -t tcp -a "$TARGET_IP" -s "$TARGET_PORT" -n "$VOL" --hostnqn "$NODE_NQN" \
		--dhchap-secret="$(<"$X/secret")"; then
		fail "connected to $VOL after ControllerUnpublishVolume"
	fi
	echo "after unpublish the node's secret is refused"
}

finish() {
	guest_request delete "" 60 || fail "DeleteVolume failed"
	kill "$FWD_PID" 2>/dev/null || true
	kill -TERM "$DRIVER_PID"
	wait_for 10 test ! -e "/proc/$DRIVER_PID/status" || true
	if grep -q -i panicked "$X/csi.log"; then fail "ebof csi panicked"; fi
}

step "start ebof csi --node and the TCP forwarder" start_node
step "host: CreateVolume (auth dhchap), ControllerPublish, NodeStage; controllers authenticated both ways" stage
step "host: NodeUnstage (the node stays published)" unstage
step "the node's NQN without the secret is refused" impostor_here
step "host: ControllerUnpublish; the secret opens nothing any more" unpublish
step "host: DeleteVolume; the node plugin stops" finish
