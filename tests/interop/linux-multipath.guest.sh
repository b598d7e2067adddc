#!/bin/bash
# Guest half of linux-multipath.sh: the kernel's native NVMe multipath over two ebof listeners of one
# subsystem. Both paths connect and merge into one head device (same NGUID/UUID, CMIC multi-port and
# multi-controller, NMIC shared, ANA reporting); fio with crc32c verify runs in a loop on the head
# while path A (port $PORT_A) is made inaccessible and optimized again with `ebof ctl ana set`, and
# then its listener is removed with `ebof ctl listener remove --disconnect`. Every fio run must pass
# (no I/O error, no verify failure) and the kernel must log no I/O error on the head device.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

MP_NQN=${MP_NQN:-nqn.2026-11.io.ebof:mpath}
PORT_A=${PORT_A:-4420} PORT_B=${PORT_B:-4421}
SEE=10
CTRL_A='' CTRL_B='' PATH_A='' PATH_B='' HEAD='' SUBSYS='' FIO_PID=''
export FIO_TIMEOUT=120

# ctl ARGS...: `ebof ctl ARGS` on the host (guest_request ctl); its output is printed
ctl() {
	local rc=0
	guest_request ctl "$*" 60 >&2 || rc=$?
	cat "$X/ctl.out" "$X/ctl.err"
	((rc == 0)) || fail "ebof ctl $* failed (status $rc)"
}

# ctrl_on PORT: the controller of $MP_NQN connected through $TARGET_IP:PORT
ctrl_on() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ -r $c/subsysnqn && $(<"$c/subsysnqn") == "$MP_NQN" ]] || continue
		[[ $(<"$c/address") == *"trsvcid=$1"* ]] && { echo "${c##*/}"; return 0; }
	done
	return 1
}

# path_of CTRL: the hidden per-path block device of namespace 1 under controller CTRL (nvmeXcYn1)
path_of() {
	local p
	for p in /sys/class/nvme/"$1"/nvme*c*n*; do
		[[ -e $p/ana_state && $(<"$p/nsid") == 1 ]] && { echo "${p##*/}"; return 0; }
	done
	return 1
}

ana_state_is() { [[ $(<"/sys/block/$1/ana_state") == "$2" ]]; }

# ana_log_says CTRL STATE: `nvme ana-log` through CTRL reports group 1 in STATE
ana_log_says() {
	local out
	out=$(run nvme ana-log "/dev/$1")
	echo "$out"
	grep -Eiq "state[[:space:]]*:[[:space:]]*$2\$" <<<"$out" || fail "nvme ana-log /dev/$1 does not report $2"
}

multipath_on() {
	local mp
	mp=$(</sys/module/nvme_core/parameters/multipath)
	echo "nvme_core.multipath=$mp"
	[[ $mp == Y ]] || fail "native NVMe multipath is off (nvme_core.multipath=$mp)"
}

connect_paths() {
	local p
	for p in "$PORT_A" "$PORT_B"; do
		run -t 60 nvme connect -t tcp -a "$TARGET_IP" -s "$p" -n "$MP_NQN"
	done
	wait_for 20 ctrl_on "$PORT_A" >/dev/null || fail "no controller through port $PORT_A"
	wait_for 20 ctrl_on "$PORT_B" >/dev/null || fail "no controller through port $PORT_B"
	CTRL_A=$(ctrl_on "$PORT_A") CTRL_B=$(ctrl_on "$PORT_B")
	wait_for 20 path_of "$CTRL_A" >/dev/null || fail "no path device under $CTRL_A"
	wait_for 20 path_of "$CTRL_B" >/dev/null || fail "no path device under $CTRL_B"
	PATH_A=$(path_of "$CTRL_A") PATH_B=$(path_of "$CTRL_B")
	wait_for 20 _nvme_has_ns "$MP_NQN" 1 || fail "no head block device for namespace 1"
	HEAD=$(nvme_ns_for "$MP_NQN" 1)
	echo "path A: $CTRL_A ($PATH_A, port $PORT_A); path B: $CTRL_B ($PATH_B, port $PORT_B); head /dev/$HEAD"
}

one_head_two_live_paths() {
	local heads out s
	heads=$(for b in /sys/block/nvme*n*; do
		[[ ${b##*/} != nvme*c*n* && -r $b/device/subsysnqn && $(<"$b/device/subsysnqn") == "$MP_NQN" ]] && echo "${b##*/}"
	done | xargs)
	[[ $heads == "$HEAD" ]] || fail "head devices of $MP_NQN: [$heads], want exactly one"
	out=$(run nvme list-subsys)
	echo "$out"
	(($(grep -cE "trsvcid=($PORT_A|$PORT_B).* live" <<<"$out") == 2)) || fail "nvme list-subsys does not show two live paths"
	for c in "$CTRL_A" "$CTRL_B"; do
		[[ $(<"/sys/class/nvme/$c/state") == live ]] || fail "$c is $(<"/sys/class/nvme/$c/state")"
	done
	{ ana_state_is "$PATH_A" optimized && ana_state_is "$PATH_B" optimized; } ||
		fail "ana_state: $PATH_A $(<"/sys/block/$PATH_A/ana_state"), $PATH_B $(<"/sys/block/$PATH_B/ana_state")"
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[[ $(<"$s/subsysnqn") == "$MP_NQN" ]] && SUBSYS=$s
	done
	[[ -n $SUBSYS ]] || fail "no nvme-subsystem for $MP_NQN"
	# both paths carry I/O, so that the failover is exercised whichever one the kernel prefers
	echo round-robin >"$SUBSYS/iopolicy"
	echo "$SUBSYS: iopolicy $(<"$SUBSYS/iopolicy"); namespace head ${HEAD}, paths $PATH_A $PATH_B"
	run nvme id-ctrl "/dev/$CTRL_A" | grep -E '^(cmic|anacap|anatt|anagrpmax|nanagrpid|mnan|oaes) '
	ana_log_says "$CTRL_A" optimized
}

# fio in a loop on the head device until /tmp/fio.stop: each run writes 16 MiB and verifies it
# (crc32c); failed runs are listed in /tmp/fio.failed, the number of finished runs is in /tmp/fio.runs
start_fio() {
	rm -f /tmp/fio.stop /tmp/fio.failed /tmp/fio.log
	echo 0 >/tmp/fio.runs
	(
		set +eE
		trap - ERR EXIT
		i=0
		until [[ -e /tmp/fio.stop ]]; do
			i=$((i + 1))
			fio_verify "mp$i" "/dev/$HEAD" 16M randwrite 16k 16 --randseed=$((4420 + i)) >>/tmp/fio.log 2>&1 ||
				echo "run $i: status $?" >>/tmp/fio.failed
			echo "$i" >/tmp/fio.runs
		done
	) &
	FIO_PID=$!
	wait_for 20 grep -q "mp1" /tmp/fio.log || fail "fio did not start"
	echo "fio loop running (pid $FIO_PID)"
}

fio_ok_so_far() {
	[[ ! -s /tmp/fio.failed ]] || { tail -n 40 /tmp/fio.log; fail "fio failed: $(</tmp/fio.failed)"; }
	echo "fio: $(</tmp/fio.runs) run(s) finished, none failed"
}

_runs_past() { (($(</tmp/fio.runs) > $1)); }
# fio_progress: one more full fio run (write + verify) finishes from now
fio_progress() {
	local n
	n=$(</tmp/fio.runs)
	wait_for 90 _runs_past "$n" || fail "no fio run finished within 90 s (stuck at $n)"
	fio_ok_so_far
}

# set_ana STATE: path A's group 1 to STATE; the host sees it in sysfs and in nvme ana-log
set_ana() {
	ctl ana set --listener "$TARGET_IP:$PORT_A" --group 1 --state "$1"
	wait_for "$SEE" ana_state_is "$PATH_A" "$1" ||
		fail "$PATH_A ana_state is $(<"/sys/block/$PATH_A/ana_state") $SEE s after the change, not $1"
	echo "$PATH_A: ana_state $(<"/sys/block/$PATH_A/ana_state"); $PATH_B: $(<"/sys/block/$PATH_B/ana_state")"
	ana_log_says "$CTRL_A" "$1"
	ana_log_says "$CTRL_B" optimized
}

_path_a_down() { [[ ! -e /sys/class/nvme/$CTRL_A || $(<"/sys/class/nvme/$CTRL_A/state") != live ]]; }

remove_path_a() {
	ctl listener remove "$TARGET_IP:$PORT_A" --disconnect
	wait_for "$SEE" _path_a_down || fail "$CTRL_A is still live after its listener was removed"
	echo "$CTRL_A: $(cat "/sys/class/nvme/$CTRL_A/state" 2>/dev/null || echo gone); $CTRL_B: $(<"/sys/class/nvme/$CTRL_B/state")"
	[[ $(<"/sys/class/nvme/$CTRL_B/state") == live ]] || fail "$CTRL_B is not live"
	run nvme list-subsys
}

stop_fio() {
	touch /tmp/fio.stop
	wait "$FIO_PID" || true
	grep -E "err=|verify|READ:|WRITE:" /tmp/fio.log | tail -n 8
	fio_ok_so_far
	(($(</tmp/fio.runs) >= 3)) || fail "only $(</tmp/fio.runs) fio runs"
	grep -c "err= 0" /tmp/fio.log
}

no_kernel_io_errors() {
	dmesg | grep -iE "nvme|ana" | tail -n 30
	! dmesg | grep -E "I/O error, dev $HEAD|Buffer I/O error on dev $HEAD" || fail "the kernel logged I/O errors on /dev/$HEAD"
	echo "no I/O error on /dev/$HEAD"
}

disconnect_all() {
	run -t 60 nvme disconnect -n "$MP_NQN"
	wait_for 20 _nvme_no_ctrl "$MP_NQN" || fail "controllers of $MP_NQN still present"
}

# ---------------------------------------------------------------------------------------------
echo "target: ebof at $TARGET_IP ports $PORT_A and $PORT_B, subsystem $MP_NQN"
step "native NVMe multipath is on" multipath_on
step "connect both paths" connect_paths
step "one head device, two live optimized paths, ANA in Identify and nvme ana-log" one_head_two_live_paths
step "fio + crc32c verify in a loop on /dev/$HEAD" start_fio
step "fio runs through both paths" fio_progress
step "path A inaccessible (ebof ctl ana set)" set_ana inaccessible
step "fio goes on through path B" fio_progress
step "path A optimized again" set_ana optimized
step "fio goes on through both paths" fio_progress
step "remove path A's listener with its controllers" remove_path_a
step "fio goes on through path B alone" fio_progress
step "stop fio: every run passed" stop_fio
step "no I/O error in the kernel log" no_kernel_io_errors
step "disconnect" disconnect_all
