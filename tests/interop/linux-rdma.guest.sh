#!/bin/bash
# Guest half of linux-rdma.sh: NVMe over RDMA (soft-RoCE) with both ends in this one guest.
#  1. rdma_rxe on the virtio-net interface (rxe0), userspace verbs checked with ibv_devices and rping
#  2. baseline, kernel against kernel: nvmet-rdma (a brd RAM disk) on $GUEST_IP:4420; nvme-cli
#     discovers, connects, lists, fio verifies and disconnects
#  3. ebof's host tools against that nvmet-rdma: discover / identify / perf --verify with -t rdma
#     (SKIPPED while `ebof discover --help` has no -t/--transport)
#  4. nvmet torn down; `ebof serve` with an RDMA listener in this guest; the kernel host discovers,
#     connects, runs fio verify (4K random, 128K sequential), mkfs.ext4 + fsck, disconnects; serve
#     is stopped and its log must show no panic (SKIPPED while `ebof serve` rejects
#     `transport = "rdma"`)
# EBOF_INTEROP_STRICT=1 turns those skips into failures.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"
# shellcheck source=guest-rdma.sh
source "$X/guest-rdma.sh"

TARGET_IP=$GUEST_IP
TARGET_PORT=${TARGET_PORT:-4420}
KNQN=nqn.2026-11.io.ebof:krdma
ENQN=nqn.2026-11.io.ebof:rdma
BRD_MIB=${BRD_MIB:-128}
EBOF_RAM=${EBOF_RAM:-128M}
FIO_SMALL=${FIO_SMALL:-8M}
FIO_SEQ=${FIO_SEQ:-32M}
SERVE_CONF=/tmp/ebof-rdma.toml
SERVE_LOG=$X/ebof-serve.log
HOSTTOOLS=0

# --- 1. soft-RoCE
setup_rdma() {
	rdma_modules
	run modprobe brd rd_nr=1 rd_size=$((BRD_MIB * 1024))
	wait_for 10 test -b /dev/ram0 || fail "no /dev/ram0"
}

# --- 2. kernel against kernel
kernel_target_up() {
	kt_rdma_up "$KNQN" "$TARGET_IP" "$TARGET_PORT" /dev/ram0
	echo "port 1: inline_data_size $(cat "$NVMET/ports/1/param_inline_data_size" 2>/dev/null || echo '?')"
}

kernel_discover() { rdma_discover "$KNQN"; }
kernel_connect() {
	rdma_connect "$KNQN"
	mkdir -p "$X/facts"
	run nvme id-ctrl "/dev/$CTRL" -o json >"$X/facts/krdma-id-ctrl.json"
}
kernel_fio() { fio_verify k-rand4k "$NSDEV" "$FIO_SMALL" randwrite 4k 16; }
kernel_fio_128k() { fio_verify k-seq128k "$NSDEV" "$FIO_SEQ" write 128k 4; }
kernel_disconnect() { nvme_disconnect "$KNQN"; }

# --- 3. ebof's host tools against nvmet-rdma
hosttools_check() {
	if ebof_knows_rdma_host; then
		HOSTTOOLS=1
		echo "'$EBOF discover --help' has -t/--transport: running the ebof host steps"
	else
		ebof_missing "'$EBOF discover --help' has no -t/--transport option: no ebof host steps"
	fi
}
_ebof_host() {
	((HOSTTOOLS)) || { ebof_missing "ebof host tools without RDMA"; return 0; }
	ulimit -l unlimited
	run -t 90 "$EBOF" "$@"
}
ebof_discover() {
	((HOSTTOOLS)) || { ebof_missing "ebof host tools without RDMA"; return 0; }
	local out
	out=$(_ebof_host discover -t rdma -a "$TARGET_IP" -s "$TARGET_PORT")
	echo "$out"
	grep -q "$KNQN" <<<"$out" || fail "ebof discover does not list $KNQN"
	grep -qi 'rdma' <<<"$out" || fail "ebof discover shows no rdma entry"
}
# ebof identify must agree with what the kernel host read from the same controller
ebof_identify() {
	((HOSTTOOLS)) || { ebof_missing "ebof host tools without RDMA"; return 0; }
	local out f mine theirs
	out=$(_ebof_host identify -t rdma -a "$TARGET_IP" -s "$TARGET_PORT" -n "$KNQN")
	echo "$out"
	grep -qE "^subnqn +: +$KNQN\$" <<<"$out" || fail "ebof identify: no subnqn $KNQN"
	for f in ioccsz iorcsz icdoff sgls mdts maxcmd; do
		mine=$(sed -n "s/^$f *: *\([0-9a-fx]*\).*/\1/p" <<<"$out")
		theirs=$(tr -d ' \n' <"$X/facts/krdma-id-ctrl.json" | grep -oE "\"$f\":[0-9]+" | cut -d: -f2)
		[[ -n $mine && -n $theirs ]] || { echo "$f: not in both (ebof '$mine', kernel '$theirs')"; continue; }
		(((mine) == theirs)) || fail "ebof identify: $f $mine, the kernel host read $theirs"
		echo "$f: $mine (same as the kernel host)"
	done
}
ebof_perf_4k() {
	_ebof_host perf -t rdma -a "$TARGET_IP" -s "$TARGET_PORT" -n "$KNQN" --rw randwrite --bs 4k --qd 8 \
		--runtime 5s --range 0-16M --verify
}
ebof_perf_128k() {
	_ebof_host perf -t rdma -a "$TARGET_IP" -s "$TARGET_PORT" -n "$KNQN" --rw write --bs 128k --qd 4 \
		--runtime 3s --range 0-32M --verify
}
kernel_target_down() {
	kt_rdma_down "$KNQN"
	# shellcheck disable=SC2016 # expanded by eval
	wait_for 10 eval '! rdma_listening "$TARGET_IP" "$TARGET_PORT"' || fail "nvmet-rdma still listens"
}

# --- 4. ebof serve with an RDMA listener (helpers in guest-rdma.sh)
serve_check() { serve_rdma_check "$SERVE_CONF" "$TARGET_IP" "$TARGET_PORT" "$ENQN" "$EBOF_RAM"; }
serve_start() {
	((SERVE)) || { ebof_missing "no RDMA in ebof serve"; return 0; }
	serve_rdma_start "$SERVE_CONF" "$SERVE_LOG" "$TARGET_IP" "$TARGET_PORT"
}
_serve_step() {
	((SERVE)) || { ebof_missing "no RDMA in ebof serve"; return 0; }
	_serve_alive || fail "ebof serve is not running: $(tail -n 20 "$SERVE_LOG")"
	"$@"
}
e_discover() { rdma_discover "$ENQN"; }
e_connect() { rdma_connect "$ENQN"; }
e_fio_4k() { fio_verify e-rand4k "$NSDEV" "$FIO_SMALL" randwrite 4k 16; }
e_fio_128k() { fio_verify e-seq128k "$NSDEV" "$FIO_SEQ" write 128k 4; }
e_ext4() {
	run -t 120 mkfs.ext4 -q -F "$NSDEV"
	run -t 120 fsck.ext4 -f -n "$NSDEV"
}
e_disconnect() { nvme_disconnect "$ENQN"; }
serve_stop() {
	((SERVE)) || { ebof_missing "no RDMA in ebof serve"; return 0; }
	serve_rdma_stop "$SERVE_LOG"
}
kernel_log() {
	dmesg | grep -iE 'rdma|rxe|nvme|infiniband' | tail -n 40 || true
}

step "modules: rdma_rxe, ib_uverbs, rdma_ucm, nvme-rdma, nvmet-rdma; brd $BRD_MIB MiB" setup_rdma
step "soft-RoCE: rdma link add $RXE_DEV type rxe netdev <eth>" rxe_add
step "userspace verbs: rping server + client on $GUEST_IP" rping_check "$GUEST_IP"
step "nvmet-rdma: $KNQN on rdma $TARGET_IP:$TARGET_PORT" kernel_target_up
step "kernel host: nvme discover -t rdma" kernel_discover
step "kernel host: nvme connect -t rdma, nvme list" kernel_connect
step "kernel host: fio randwrite 4k QD16 $FIO_SMALL verify" kernel_fio
step "kernel host: fio write 128k QD4 $FIO_SEQ verify" kernel_fio_128k
step "kernel host: nvme disconnect" kernel_disconnect
step "ebof host tools know -t rdma?" hosttools_check
step "ebof discover -t rdma (nvmet-rdma)" ebof_discover
step "ebof identify -t rdma (nvmet-rdma)" ebof_identify
step "ebof perf -t rdma randwrite 4k QD8 5s --verify" ebof_perf_4k
step "ebof perf -t rdma write 128k QD4 3s --verify" ebof_perf_128k
step "nvmet-rdma torn down" kernel_target_down
step "ebof serve accepts transport = \"rdma\"?" serve_check
step "ebof serve: RDMA listener on $TARGET_IP:$TARGET_PORT, RAM $EBOF_RAM" serve_start
step "kernel host: nvme discover -t rdma (ebof)" _serve_step e_discover
step "kernel host: nvme connect -t rdma (ebof), nvme list" _serve_step e_connect
step "kernel host: fio randwrite 4k QD16 $FIO_SMALL verify (ebof)" _serve_step e_fio_4k
step "kernel host: fio write 128k QD4 $FIO_SEQ verify (ebof)" _serve_step e_fio_128k
step "kernel host: mkfs.ext4 + fsck -f -n (ebof)" _serve_step e_ext4
step "kernel host: nvme disconnect (ebof)" _serve_step e_disconnect
step "ebof serve stopped; no panic in its log" serve_stop
step "kernel log (rdma, rxe, nvme)" kernel_log
step "every ebof step ran (EBOF_INTEROP_STRICT)?" strict_verdict
