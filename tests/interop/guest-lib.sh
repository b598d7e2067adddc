# shellcheck shell=bash
# Guest-side library for the interop scenarios: sourced by the guest scripts (which run inside the
# QEMU guest from /xchg, the per-run exchange folder shared with the host).
#
# Style: `set -e` with an ERR trap that names the failing command and step, so a guest script is a
# flat list of `step "title" function` calls whose bodies are plain commands.
#
#   step TITLE FUNC [ARGS]   run FUNC as a numbered, timed step (timings in /xchg/guest-timings.tsv)
#   run [-t SECS] CMD...     print and run an external command under a timeout (default 120 s)
#   fail MESSAGE             fail the current step with a message
#   guest_request NAME [ARG] [TIMEOUT]   ask the host to run host_on_NAME; returns its status
#   nvme_connect NQN [ARGS]  connect over $NVME_TRANSPORT (tcp) to $TARGET_IP:$TARGET_PORT; sets
#                            CTRL and NSDEV
#   nvme_disconnect NQN      disconnect and check the controller is gone
#   fio_verify NAME DEV SIZE RW BS QD [FIO ARGS]   write + verify with crc32c
#   step_skip MESSAGE        mark the current step SKIPPED (listed in /xchg/skipped.txt)

set -eEo pipefail
X=${X:-/xchg}
TARGET_IP=${TARGET_IP:-${HOST_IP:-10.77.0.1}}
TARGET_PORT=${TARGET_PORT:-4420}
DISC_PORT=${DISC_PORT:-8009}
NVME_TRANSPORT=${NVME_TRANSPORT:-tcp} # tcp | rdma: what nvme_connect uses and nvme_ctrl_for matches
CTRL='' NSDEV=''
STEP_NO=0 STEP_TITLE='' STEP_T0='' STEP_RESULT=''
_GUEST_T0=${EPOCHREALTIME/./}

_us() { echo "${EPOCHREALTIME/./}"; }
_secs() { awk -v d="$1" 'BEGIN { printf "%.1f", d / 1e6 }'; } # microseconds -> "12.3"

_on_err() {
	local rc=$1 cmd=$2 line=$3 file=${BASH_SOURCE[1]##*/}
	[[ $file == guest.sh ]] && file=${GUEST_SCRIPT_NAME:-$file}
	echo "!!!! command failed (status $rc) at $file:$line: $cmd"
}
# _on_exit [STATUS]: the EXIT trap (a script's own exit trap may call it with the status it saw)
_on_exit() {
	local rc=${1:-$?}
	if [[ -n $STEP_TITLE ]]; then
		echo "!!!! FAILED in step [$STEP_NO] $STEP_TITLE"
		_step_end "FAIL(status $rc)"
	fi
	echo "---- guest script: $STEP_NO steps, $(_secs $(($(_us) - _GUEST_T0))) s, status $rc ----"
}
trap '_on_err $? "$BASH_COMMAND" $LINENO' ERR
trap _on_exit EXIT

fail() {
	echo "!!!! $*"
	exit 1
}

_step_end() {
	local secs
	secs=$(_secs $(($(_us) - STEP_T0)))
	printf '%s\t%s\t%s\n' "[$STEP_NO] $STEP_TITLE" "$secs" "$1" >>"$X/guest-timings.tsv"
	echo "---- [$STEP_NO] $1 in $secs s"
	STEP_TITLE=
}

step() {
	local title=$1
	shift
	STEP_NO=$((STEP_NO + 1))
	STEP_TITLE=$title
	STEP_T0=$(_us)
	echo
	echo "==== [$STEP_NO] $title ===="
	"$@"
	_step_end "${STEP_RESULT:-OK}" # a step may set STEP_RESULT=SKIP (step_skip)
	STEP_RESULT=
}

# step_skip MESSAGE: inside a step, report it as SKIP instead of OK (and list it in skipped.txt)
# shellcheck disable=SC2034 # STEP_RESULT is read by step
step_skip() {
	echo "SKIPPED: $*"
	STEP_RESULT=SKIP
	echo "[$STEP_NO] $STEP_TITLE: $*" >>"$X/skipped.txt"
}

# run [-t SECS] CMD...: echo (to stderr), then run with a timeout (shell functions run without one)
run() {
	local t=${RUN_TIMEOUT:-120}
	if [[ $1 == -t ]]; then
		t=$2
		shift 2
	fi
	echo "+ $*" >&2 # stderr: keeps captured or redirected stdout clean
	if [[ $(type -t "$1") == function ]]; then
		"$@"
	else
		timeout -k 5 "$t" "$@"
	fi
}

# wait_for SECS CMD...: retry CMD every 0.2 s until it succeeds or SECS pass
wait_for() {
	local end=$(($(_us) + $1 * 1000000))
	shift
	until "$@"; do
		(($(_us) < end)) || return 1
		sleep 0.2
	done
}

# guest_request NAME [ARG] [TIMEOUT]: rendezvous with the host through the exchange folder. The host
# (lib.sh vm_run) sees /xchg/req-NAME, runs host_on_NAME ARG and answers /xchg/done-NAME with the
# function's exit status, which this returns.
guest_request() {
	local name=$1 arg=${2:-} timeout=${3:-300} rc
	rm -f "$X/done-$name"
	printf '%s' "$arg" >"$X/.req-$name"
	mv "$X/.req-$name" "$X/req-$name"
	echo "---- asking the host for '$name' (waiting up to $timeout s)"
	if ! wait_for "$timeout" test -e "$X/done-$name"; then
		echo "!!!! host did not answer '$name' within $timeout s"
		return 124
	fi
	rc=$(<"$X/done-$name")
	rm -f "$X/done-$name"
	echo "---- host answered '$name': status $rc"
	return "$rc"
}

# ---------------------------------------------------------------------------------------------
# NVMe host helpers (kernel initiator through nvme-cli)

# nvme_ctrl_for NQN: name of a controller over $NVME_TRANSPORT connected to subsystem NQN (e.g. nvme0)
nvme_ctrl_for() {
	local c sub tr
	for c in /sys/class/nvme/nvme*; do
		# A controller being deleted can vanish between the listing and the reads: skip it.
		# (`read`, not `$(cat ...)`: no fork per entry, which 1024 namespaces under TCG feel.)
		sub= tr=
		read -r sub 2>/dev/null <"$c/subsysnqn" || [[ -n $sub ]] || continue
		read -r tr 2>/dev/null <"$c/transport" || [[ -n $tr ]] || continue
		if [[ $sub == "$1" && $tr == "$NVME_TRANSPORT" ]]; then
			echo "${c##*/}"
			return 0
		fi
	done
	return 1
}

# nvme_ns_for NQN NSID: block device name of namespace NSID of subsystem NQN (the multipath head
# device nvmeXnY when native multipath is on; the hidden per-path nvmeXcYnZ devices are skipped)
nvme_ns_for() {
	local b n sub id
	for b in /sys/block/nvme*n*; do
		n=${b##*/}
		[[ $n == nvme*c*n* ]] && continue
		# A namespace being removed can vanish between the listing and the reads: skip it.
		sub= id=
		read -r sub 2>/dev/null <"$b/device/subsysnqn" || [[ -n $sub ]] || continue
		read -r id 2>/dev/null <"$b/nsid" || [[ -n $id ]] || continue
		if [[ $sub == "$1" && $id == "$2" ]]; then
			echo "$n"
			return 0
		fi
	done
	return 1
}

_nvme_has_ns() { nvme_ns_for "$1" "$2" >/dev/null && [[ -b /dev/$(nvme_ns_for "$1" "$2") ]]; }
_nvme_no_ctrl() { ! nvme_ctrl_for "$1" >/dev/null; }

# nvme_connect NQN [NVME CONNECT ARGS]: connect to $TARGET_IP:$TARGET_PORT and wait for namespace 1;
# sets CTRL (nvme0) and NSDEV (/dev/nvme0n1)
nvme_connect() {
	local nqn=$1
	shift
	run -t 60 nvme connect -t "$NVME_TRANSPORT" -a "$TARGET_IP" -s "$TARGET_PORT" -n "$nqn" "$@"
	wait_for 20 nvme_ctrl_for "$nqn" >/dev/null || fail "no controller for $nqn after connect"
	CTRL=$(nvme_ctrl_for "$nqn")
	wait_for 20 _nvme_has_ns "$nqn" "${NSID:-1}" || fail "no namespace ${NSID:-1} block device for $nqn"
	NSDEV=/dev/$(nvme_ns_for "$nqn" "${NSID:-1}")
	echo "connected: controller /dev/$CTRL ($(<"/sys/class/nvme/$CTRL/address")), namespace $NSDEV" \
		"($(($(<"/sys/block/${NSDEV#/dev/}/size") * 512 / 1048576)) MiB)"
}

nvme_disconnect() {
	local nqn=$1 out
	out=$(run -t 60 nvme disconnect -n "$nqn")
	echo "$out"
	[[ $out == *"disconnected 0 "* ]] && fail "nvme disconnect found no controller for $nqn"
	wait_for 20 _nvme_no_ctrl "$nqn" || fail "controller for $nqn still present after disconnect"
	CTRL='' NSDEV=''
}

# smart_field DEV FIELD: a numeric field of `nvme smart-log -o json` (e.g. data_units_written)
smart_field() {
	nvme smart-log "$1" -o json | tr -d ' \n' | sed -n "s/.*\"$2\":\"\{0,1\}\([0-9]*\).*/\1/p"
}

# fio_verify NAME DEV SIZE RW BS QD [MORE FIO ARGS]: write SIZE and read it back with crc32c verify
fio_verify() {
	local name=$1 dev=$2 size=$3 rw=$4 bs=$5 qd=$6
	shift 6
	run -t "${FIO_TIMEOUT:-600}" fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 \
		--rw="$rw" --bs="$bs" --iodepth="$qd" --size="$size" --verify=crc32c --verify_fatal=1 \
		--do_verify=1 --randseed=4420 --group_reporting --eta=never "$@"
}
