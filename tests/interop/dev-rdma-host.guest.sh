#!/bin/bash
# Guest half of dev-rdma-host.sh: soft-RoCE, nvmet-rdma on a brd disk at $GUEST_IP:4420, then
# `ebof discover/identify/perf -t rdma` against it from inside the guest.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

NQN=nqn.2026-11.io.ebof:krdma
IP=$GUEST_IP
PORT=4420
NVMET=/sys/kernel/config/nvmet
EBOF=$EBOF_BIN

setup_rdma() {
	local m iface
	for m in rdma_rxe ib_uverbs rdma_ucm nvmet nvmet-rdma; do run modprobe "$m"; done
	run modprobe brd rd_nr=1 rd_size=$((64 * 1024))
	iface=$(ls /sys/class/net | grep -v '^lo$' | head -n1)
	run rdma link add rxe0 type rxe netdev "$iface"
	wait_for 10 grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || fail "rxe0 not active"
	run ibv_devices
	echo "RLIMIT_MEMLOCK $(ulimit -l)"
}

setup_nvmet() {
	local s=$NVMET/subsystems/$NQN p=$NVMET/ports/1
	mkdir "$s"
	echo 1 >"$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n /dev/ram0 >"$s/namespaces/1/device_path"
	echo 1 >"$s/namespaces/1/enable"
	mkdir "$p"
	echo rdma >"$p/addr_trtype"
	echo ipv4 >"$p/addr_adrfam"
	echo "$IP" >"$p/addr_traddr"
	echo "$PORT" >"$p/addr_trsvcid"
	ln -s "$s" "$p/subsystems/$NQN"
	sleep 1
	run rdma resource show cm_id
}

refused_port() {
	local out
	if out=$("$EBOF" identify -t rdma -a "$IP" -s 4999 -n "$NQN" 2>&1); then
		fail "identify on a port without a listener succeeded"
	fi
	echo "$out"
	[[ $(wc -l <<<"$out") == 1 && $out == "ebof: error: "* && $out != *panicked* ]] || fail "not one clear error"
}

dhchap_rdma() {
	local h=nqn.2014-08.org.nvmexpress:uuid:0badc0de-1111-2222-3333-444455556666
	local s=$NVMET/subsystems/$NQN key out
	mkdir "$NVMET/hosts/$h"
	if [[ ! -e $NVMET/hosts/$h/dhchap_key ]]; then
		echo "this kernel's nvmet has no DH-HMAC-CHAP (no dhchap_key attribute): skipped"
		return 0
	fi
	key=$(nvme gen-dhchap-key -n "$h" -m 1)
	echo "$key" >"$NVMET/hosts/$h/dhchap_key"
	echo 0 >"$s/attr_allow_any_host"
	ln -s "$NVMET/hosts/$h" "$s/allowed_hosts/$h"
	ebof_rdma identify -t rdma -a "$IP" -s "$PORT" -n "$NQN" --hostnqn "$h" --dhchap-secret "$key" | head -n 3
	if out=$("$EBOF" identify -t rdma -a "$IP" -s "$PORT" -n "$NQN" --hostnqn "$h" 2>&1); then
		fail "identify without the secret succeeded"
	fi
	echo "$out"
	[[ $out == *DH-HMAC-CHAP* ]] || fail "no DH-HMAC-CHAP in the error"
	rm "$s/allowed_hosts/$h"
	echo 1 >"$s/attr_allow_any_host"
}

ebof_to_ebof() {
	local conf=/tmp/serve-rdma.toml log=/tmp/serve-rdma.log enqn=nqn.2026-11.io.ebof:erdma pid
	printf '[[listeners]]\naddress = "%s"\nport = 4421\ntransport = "rdma"\n\n[[subsystems]]\nnqn = "%s"\nallow_any_host = true\n\n[[subsystems.namespaces]]\nnsid = 1\nbackend = "ram"\nsize = "64M"\n' "$IP" "$enqn" >"$conf"
	ulimit -l unlimited
	"$EBOF" serve --config "$conf" >"$log" 2>&1 &
	pid=$!
	wait_for 60 sh -c "rdma resource show cm_id | grep -q 'state LISTEN.*:4421'" || { cat "$log"; fail "ebof serve does not listen"; }
	ebof_rdma discover -t rdma -a "$IP" -s 4421
	ebof_rdma identify -t rdma -a "$IP" -s 4421 -n "$enqn" | head -n 8
	ebof_rdma perf -t rdma -a "$IP" -s 4421 -n "$enqn" --rw randrw --bs 4k --qd 16 --runtime 3s --range 0-16M --verify
	ebof_rdma perf -t rdma -a "$IP" -s 4421 -n "$enqn" --rw write --bs 128k --qd 4 --queues 2 --runtime 2s --range 0-32M --verify
	kill "$pid"
	wait "$pid" || true
	! grep -q panicked "$log" || { cat "$log"; fail "ebof serve panicked"; }
}

ebof_rdma() { run -t 300 env RUST_LOG=${RUST_LOG:-nvmf_host=debug} "$EBOF" "$@"; }

step "soft-RoCE (rxe0) and modules" setup_rdma
step "nvmet-rdma: $NQN on $IP:$PORT (64 MiB brd)" setup_nvmet
step "ebof discover -t rdma" ebof_rdma discover -t rdma -a "$IP" -s "$PORT"
step "ebof discover -t rdma without -s (8009 refused, falls back to 4420)" \
	ebof_rdma discover -t rdma -a "$IP"
step "ebof identify -t rdma on a port without a listener: one clear error" refused_port
step "ebof identify -t rdma" ebof_rdma identify -t rdma -a "$IP" -s "$PORT" -n "$NQN"
step "ebof perf -t rdma randrw 4k qd8 --verify (in-capsule writes)" \
	ebof_rdma perf -t rdma -a "$IP" -s "$PORT" -n "$NQN" --rw randrw --bs 4k --qd 8 --runtime 3s --range 0-8M --verify
step "ebof perf -t rdma write 128k qd4 --verify (keyed-SGL writes)" \
	ebof_rdma perf -t rdma -a "$IP" -s "$PORT" -n "$NQN" --rw write --bs 128k --qd 4 --runtime 2s --range 0-16M --verify
step "ebof perf -t rdma randread 64k qd16, 2 queues" \
	ebof_rdma perf -t rdma -a "$IP" -s "$PORT" -n "$NQN" --rw randread --bs 64k --qd 16 --queues 2 --runtime 2s --range 0-16M
step "DH-HMAC-CHAP over RDMA (nvmet host key): with and without the secret" dhchap_rdma
step "ebof host tools against ebof serve (RDMA listener) in the same guest" ebof_to_ebof
step "nvmet log" sh -c "dmesg | grep -iE 'nvmet|rdma' | tail -n 30"
