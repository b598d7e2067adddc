#!/bin/bash
# Guest half of linux-target.sh: the Linux kernel's own NVMe/TCP target (nvmet + nvmet-tcp) on a brd
# RAM disk, listening on $GUEST_IP:$TARGET_PORT, for our host tools on the host side of the tap.
# The guest records what the kernel's own initiator sees of that target (discovery log, id-ctrl,
# id-ns, ...) in /xchg/facts/ for comparison, then asks the host to run its commands
# (guest_request target-ready) and waits for them, then shows the target's kernel log.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

NQN=${KERNEL_NQN:-nqn.2026-11.io.ebof:kernel}
TARGET_IP=$GUEST_IP
BRD_MIB=${BRD_MIB:-512}
NVMET=/sys/kernel/config/nvmet
FACTS=$X/facts

load_modules() {
	run modprobe nvmet
	run modprobe nvmet-tcp
	run modprobe brd rd_nr=1 rd_size=$((BRD_MIB * 1024))
	wait_for 10 test -b /dev/ram0 || fail "no /dev/ram0"
}

configure_target() {
	local s=$NVMET/subsystems/$NQN p=$NVMET/ports/1
	mkdir "$s"
	echo 1 >"$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n /dev/ram0 >"$s/namespaces/1/device_path"
	echo 1 >"$s/namespaces/1/enable"
	mkdir "$p"
	echo tcp >"$p/addr_trtype"
	echo ipv4 >"$p/addr_adrfam"
	echo "$TARGET_IP" >"$p/addr_traddr"
	echo "$TARGET_PORT" >"$p/addr_trsvcid"
	ln -s "$s" "$p/subsystems/$NQN"
	wait_for 10 _listening || fail "nvmet-tcp does not listen on $TARGET_IP:$TARGET_PORT"
	run ss -ltn "sport = :$TARGET_PORT"
	echo "subsystem $NQN: namespace 1 = /dev/ram0 ($BRD_MIB MiB, 512-byte blocks)," \
		"port 1 = tcp $TARGET_IP:$TARGET_PORT, any host"
}
_listening() { [[ -n $(ss -Hltn "sport = :$TARGET_PORT") ]]; }

# what the kernel initiator sees of the kernel target (over the guest's own address)
collect_facts() {
	mkdir -p "$FACTS"
	run nvme discover -t tcp -a "$TARGET_IP" -s "$TARGET_PORT" -o json | tee "$FACTS/discover.json"
	nvme_connect "$NQN"
	run nvme id-ctrl "/dev/$CTRL" -o json >"$FACTS/id-ctrl.json"
	run nvme id-ns "$NSDEV" -o json >"$FACTS/id-ns.json"
	run nvme get-feature -f 7 "/dev/$CTRL" >"$FACTS/feature-7.txt"
	run nvme smart-log "/dev/$CTRL" -o json >"$FACTS/smart-log.json"
	run nvme show-regs "/dev/$CTRL" -H >"$FACTS/regs.txt" 2>&1 || true
	cat "/sys/class/nvme/$CTRL/queue_count" "/sys/class/nvme/$CTRL/sqsize" >"$FACTS/queues.txt"
	nvme_disconnect "$NQN"
	ls -l "$FACTS"
	grep -E '"(vid|mdts|cntlid|ver|sqes|cqes|maxcmd|nn|ioccsz|iorcsz|subnqn)"' "$FACTS/id-ctrl.json" || true
}

target_log() {
	echo "nvmet kernel messages:"
	dmesg | grep -E 'nvmet|nvme' || true
	local errs
	errs=$(dmesg | grep -ciE 'nvmet.*(error|fail|invalid)' || true)
	echo "nvmet error-looking messages: $errs"
}

step "load nvmet, nvmet-tcp, brd ($BRD_MIB MiB)" load_modules
step "configure $NQN on $TARGET_IP:$TARGET_PORT" configure_target
[[ ${COLLECT_FACTS:-1} == 1 ]] && step "kernel initiator's view of the target (facts/)" collect_facts
step "host tools against the kernel target" guest_request target-ready "$TARGET_IP:$TARGET_PORT" \
	"${HOST_TIMEOUT:-900}"
step "kernel target log" target_log
