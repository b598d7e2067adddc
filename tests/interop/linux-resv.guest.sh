#!/bin/bash
# Guest half of linux-resv.sh: two hosts (A and B: their own --hostnqn and --hostid) connected to
# one subsystem, native multipath off (NVME_CORE_ARGS=multipath=N), so /dev/nvmeXn1 of each
# controller carries that host's commands. Reservations through nvme-cli, a Reservation Conflict
# seen by the non-holder (nvme write and a plain O_DIRECT write), and PTPL across a restart of
# `ebof serve` (guest_request restart; the host kernel reconnects by itself).
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

RESV_NQN=${RESV_NQN:-nqn.2026-11.io.ebof:resv}
HOST_A=nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a
HOST_B=nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-00000000000b
ID_A=aaaaaaaa-0000-4000-8000-00000000000a
ID_B=bbbbbbbb-0000-4000-8000-00000000000b
KEY_A=0xa1 KEY_B=0xb2
CTRL_A='' CTRL_B='' DEV_A='' DEV_B='' REPORT=''

# ctrl_of HOSTNQN: the controller of $RESV_NQN connected as HOSTNQN
ctrl_of() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/hostnqn && $(<"$c/subsysnqn") == "$RESV_NQN" && $(<"$c/hostnqn") == "$1" ]] || continue
		echo "${c##*/}"
		return 0
	done
	return 1
}
# disk_of CTRL: the block device of namespace 1 on controller CTRL (multipath off: nvmeXnY)
disk_of() {
	local d
	for d in /sys/class/nvme/"$1"/nvme*n*; do
		[[ -e $d/nsid && $(<"$d/nsid") == 1 ]] || continue
		echo "/dev/${d##*/}"
		return 0
	done
	return 1
}
_live() { [[ $(<"/sys/class/nvme/$1/state") == live ]]; }
_has_disk() { disk_of "$1" >/dev/null && [[ -b $(disk_of "$1") ]]; }

connect_as() { # connect_as HOSTNQN HOSTID
	run -t 60 nvme connect -t tcp -a "$TARGET_IP" -s "$TARGET_PORT" -n "$RESV_NQN" \
		--hostnqn="$1" --hostid="$2" --reconnect-delay=1 --ctrl-loss-tmo=120
}

# fabrics_connect_as HOSTNQN HOSTID: the same connect through the kernel's /dev/nvme-fabrics.
# nvme-cli 2.3 refuses a second connect to the same address and subsystem ("already connected",
# even with --duplicate-connect) without looking at the host NQN; the kernel itself accepts it
# (its duplicate check compares host NQN and host ID too).
fabrics_connect_as() {
	local opts="nqn=$RESV_NQN,transport=tcp,traddr=$TARGET_IP,trsvcid=$TARGET_PORT,hostnqn=$1,hostid=$2"
	opts+=",reconnect_delay=1,ctrl_loss_tmo=120"
	echo "+ echo $opts > /dev/nvme-fabrics"
	exec {fd}<>/dev/nvme-fabrics
	echo -n "$opts" >&"$fd" || fail "the kernel refused: $opts"
	read -r -u "$fd" reply || true
	exec {fd}>&-
	echo "kernel: $reply"
}

connect_both() {
	connect_as "$HOST_A" "$ID_A"
	fabrics_connect_as "$HOST_B" "$ID_B"
	wait_for 20 ctrl_of "$HOST_A" >/dev/null || fail "no controller for host A"
	wait_for 20 ctrl_of "$HOST_B" >/dev/null || fail "no controller for host B"
	CTRL_A=$(ctrl_of "$HOST_A") CTRL_B=$(ctrl_of "$HOST_B")
	[[ $CTRL_A != "$CTRL_B" ]] || fail "both hosts share controller $CTRL_A"
	wait_for 20 _has_disk "$CTRL_A" || fail "no namespace device on $CTRL_A"
	wait_for 20 _has_disk "$CTRL_B" || fail "no namespace device on $CTRL_B"
	DEV_A=$(disk_of "$CTRL_A") DEV_B=$(disk_of "$CTRL_B")
	echo "host A: $CTRL_A $DEV_A (cntlid $(<"/sys/class/nvme/$CTRL_A/cntlid")); host B: $CTRL_B $DEV_B" \
		"(cntlid $(<"/sys/class/nvme/$CTRL_B/cntlid"))"
	run nvme list-subsys
}

advertised() {
	local oncs rescap nmic
	oncs=$(run nvme id-ctrl "$DEV_A" -o json | jq -r .oncs)
	read -r rescap nmic <<<"$(run nvme id-ns "$DEV_A" -o json | jq -r '"\(.rescap) \(.nmic)"')"
	echo "ONCS $oncs, RESCAP $rescap, NMIC $nmic"
	((oncs & 0x20)) || fail "ONCS bit 5 (Reservations) not set"
	((rescap == 0xff)) || fail "RESCAP $rescap: expected 0xff (six types, IEKEY, PTPL)"
	((nmic & 1)) || fail "NMIC bit 0 (shared) not set"
}

# report DEV: `nvme resv-report --eds -o json` into REPORT (printed)
report() {
	REPORT=$(run nvme resv-report "$1" -n 1 --eds -o json)
	echo "$REPORT"
}
# rkey_holds KEY: "1" if the registrant with KEY holds the reservation (per REPORT), "0" if it
# does not, nothing if there is no such registrant
rkey_holds() { jq -r --argjson k "$(($1))" '.regctlext[] | select(.rkey == $k) | .rcsts' <<<"$REPORT"; }

# expect_conflict WHAT CMD...: CMD must fail, saying Reservation Conflict
expect_conflict() {
	local what=$1 out
	shift
	echo "+ $* (must fail: Reservation Conflict)"
	if out=$(timeout -k 5 60 "$@" 2>&1); then
		echo "$out"
		fail "$what succeeded under another host's reservation"
	fi
	echo "$out"
	grep -qiE 'reservation.?conflict' <<<"$out" || fail "$what failed, but not with Reservation Conflict"
}

register_acquire() {
	# A registers with PTPL on (CPTPL 11b), B registers; A takes Write Exclusive.
	run nvme resv-register "$DEV_A" -n 1 --nrkey="$KEY_A" --rrega=0 --cptpl=3
	run nvme resv-register "$DEV_B" -n 1 --nrkey="$KEY_B" --rrega=0
	# Registering again with another key is a conflict.
	expect_conflict "re-register with another key" nvme resv-register "$DEV_B" -n 1 --nrkey=0x99 --rrega=0
	run nvme resv-acquire "$DEV_A" -n 1 --crkey="$KEY_A" --rtype=1 --racqa=0
	report "$DEV_B"
	[[ $(jq -r .rtype <<<"$REPORT") == 1 ]] || fail "report: reservation type is not 1 (Write Exclusive)"
	[[ $(jq -r .regctl <<<"$REPORT") == 2 ]] || fail "report: not two registrants"
	[[ $(jq -r .ptpls <<<"$REPORT") == 1 ]] || fail "report: PTPL state not on"
	[[ $(rkey_holds "$KEY_A") == 1 ]] || fail "report: A (key $KEY_A) does not hold the reservation"
	[[ $(rkey_holds "$KEY_B") == 0 ]] || fail "report: B (key $KEY_B) missing or holding"
	local out
	out=$(run nvme get-feature "$DEV_A" -n 1 -f 0x83)
	echo "$out"
	[[ $out =~ value:[[:space:]]*0x0*1([^0-9a-fA-F]|$) ]] ||
		fail "Get Features Reservation Persistence does not say PTPL on"
}

conflicts() {
	local out
	# Write Exclusive: B (registrant, not holder) may read, not write; A writes.
	head -c 512 /dev/urandom >/tmp/blk
	run nvme read "$DEV_B" -s 0 -c 0 -z 512 -d /tmp/out >/dev/null
	expect_conflict "a write by B" nvme write "$DEV_B" -s 0 -c 0 -z 512 -d /tmp/blk
	# The block layer sees it too (the kernel maps Reservation Conflict to an I/O error).
	if run dd if=/tmp/blk of="$DEV_B" bs=512 count=1 oflag=direct 2>&1; then
		fail "an O_DIRECT write by B succeeded under A's reservation"
	fi
	run nvme write "$DEV_A" -s 0 -c 0 -z 512 -d /tmp/blk
	expect_conflict "an acquire by B" nvme resv-acquire "$DEV_B" -n 1 --crkey="$KEY_B" --rtype=1 --racqa=0
	expect_conflict "a release with a wrong key" nvme resv-release "$DEV_A" -n 1 --crkey=0x5 --rtype=1 --rrela=0
	# EDS=0 cannot carry 128-bit host identifiers: Host Identifier Inconsistent Format.
	if out=$(run nvme resv-report "$DEV_A" -n 1 2>&1); then
		echo "$out"
		fail "resv-report without --eds succeeded"
	fi
	echo "$out"
	grep -qiE 'host.?id.*inconsistent|0x18|HOST_ID_INCONSIST' <<<"$out" ||
		fail "resv-report without --eds failed, but not with Host Identifier Inconsistent Format"
}

_reconnected() { dmesg | grep -q "$1: Successfully reconnected"; }
restart_target() {
	guest_request restart "" 60 || fail "the host could not restart ebof serve"
	# Both controllers lost their connection and reconnected to the new process.
	wait_for 60 _reconnected "$CTRL_A" || fail "$CTRL_A did not reconnect"
	wait_for 60 _reconnected "$CTRL_B" || fail "$CTRL_B did not reconnect"
	wait_for 30 _live "$CTRL_A" || fail "$CTRL_A not live after reconnecting"
	wait_for 30 _live "$CTRL_B" || fail "$CTRL_B not live after reconnecting"
	dmesg | grep -E "nvme[0-9]+: Successfully reconnected"
	echo "both controllers live again: $CTRL_A $(<"/sys/class/nvme/$CTRL_A/state"), $CTRL_B $(<"/sys/class/nvme/$CTRL_B/state")"
}

after_restart() {
	report "$DEV_A"
	[[ $(jq -r .rtype <<<"$REPORT") == 1 ]] || fail "after the restart: no Write Exclusive reservation"
	[[ $(jq -r .regctl <<<"$REPORT") == 2 ]] || fail "after the restart: not two registrants"
	[[ $(rkey_holds "$KEY_A") == 1 && $(rkey_holds "$KEY_B") == 0 ]] ||
		fail "after the restart: the registrants or the holder changed"
	expect_conflict "a write by B after the restart" nvme write "$DEV_B" -s 0 -c 0 -z 512 -d /tmp/blk
}

preempt_release_clear() {
	# B preempts A (PRKEY = A's key): B holds Exclusive Access, A is unregistered and may not read.
	run nvme resv-acquire "$DEV_B" -n 1 --crkey="$KEY_B" --prkey="$KEY_A" --rtype=2 --racqa=1
	report "$DEV_B"
	[[ $(jq -r .rtype <<<"$REPORT") == 2 && $(jq -r .regctl <<<"$REPORT") == 1 ]] ||
		fail "after the preempt: expected one registrant holding Exclusive Access"
	expect_conflict "a read by the preempted host" nvme read "$DEV_A" -s 0 -c 0 -z 512 -d /tmp/out
	run nvme resv-release "$DEV_B" -n 1 --crkey="$KEY_B" --rtype=2 --rrela=0
	run nvme write "$DEV_A" -s 0 -c 0 -z 512 -d /tmp/blk
	run nvme resv-release "$DEV_B" -n 1 --crkey="$KEY_B" --rrela=1
	report "$DEV_B"
	[[ $(jq -r .regctl <<<"$REPORT") == 0 && $(jq -r .rtype <<<"$REPORT") == 0 ]] ||
		fail "after clear: registrants or a reservation left"
}

disconnect_both() {
	run -t 60 nvme disconnect -n "$RESV_NQN"
	wait_for 20 _nvme_no_ctrl "$RESV_NQN" || fail "controllers left after disconnect"
}

step "connect as two hosts (multipath off)" connect_both
step "ONCS, RESCAP and NMIC advertise reservations" advertised
step "register both (A with PTPL), A acquires Write Exclusive" register_acquire
step "B conflicts on writes, reads; EDS=0 refused" conflicts
step "restart ebof serve (PTPL)" restart_target
step "the reservation survived the restart" after_restart
step "preempt, release, clear" preempt_release_clear
step "disconnect" disconnect_both
