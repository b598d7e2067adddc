#!/bin/bash
# Guest half of linux-mirror.sh (issue 34 "Tests"; trixie guest: Linux 6.12, nvme-cli 2.13,
# fio, jq; native multipath). Runs alone (as the guest script of linux-mirror.sh) or at the end of
# another trixie scenario's guest script: `source "$X/mirror.guest.sh" && mirror_steps`.
#
# Box A (MIRROR_IP_A) is the first primary, box B (MIRROR_IP_B) the secondary, both with a witness;
# the host side answers guest_request mirror "ACTION BOX" (kill, stop, cont, restart, status, ctl).
# Steps:
#   1. connect both paths of MIRROR_NQN: one subsystem, two live controllers, one path optimized
#      (A) and one inaccessible (B), one head device;
#   2. fio writes with verify headers (rate-limited so the kill lands in the middle) while A is
#      killed with kill -9: fio must finish with no error (I/O moves to B once the witness lets B
#      take over), and a verify pass reads everything back (through B); the longest write
#      completion (fio's clat max) is the stall the application saw;
#   3. A restarts: it comes back as secondary (never a second primary), its path inaccessible,
#      and resyncs (B's mirror status reaches in-sync);
#   4. B is killed: A is promoted, its path optimized; a verify pass reads everything back from A;
#      B restarts as secondary and resyncs;
#   5. the same with the primary (A) paused with SIGSTOP instead of killed, resumed after B's
#      promotion: A must not complete a write after it (its status fenced or secondary, epoch
#      below B's), and a verify pass of what fio wrote (through B) passes.
# Before step 2 the host registers a key and takes Write Exclusive through A (fio then writes as
# the holder); after it, `nvme resv-report` through B shows both (replicated reservations).
# Figures (seconds) go to /xchg/mirror-figures.tsv; the host side prints them.
# While MIRROR_SKIP is set (this ebof rejects the configuration) every step SKIPs with it.

if [[ ${GUEST_SCRIPT_NAME:-} == linux-mirror.guest.sh ]]; then
	# shellcheck source=guest-lib.sh
	source "$GUEST_LIB"
fi

M_NQN=${MIRROR_NQN:-nqn.2026-11.io.ebof:mirror}
M_PORT=${MIRROR_PORT:-4420}
declare -A M_IP=([A]=${MIRROR_IP_A:-10.77.0.21} [B]=${MIRROR_IP_B:-10.77.0.22})
M_SECS=${MIRROR_FAILOVER_SECS:-30}
M_HOST=nqn.2014-08.org.nvmexpress:uuid:3a1c0001-0000-4000-8000-0000000000a1
M_HOSTID=3a1c0001-0000-4000-8000-0000000000a1
M_SIZE=32M  # what fio writes and verifies (the namespace is 64 MiB)
M_DEV=''
declare -A M_CTRL=()
# the peer's state in the status JSON (`in-sync`, `degraded`, `resyncing`, `connecting`): `state`
# in the design's MirrorView (`peer` is the peer's address); the alternatives until it settles
M_STATE='(.state // .peer_state // .peer)'


_m_skip() { [[ -n ${MIRROR_SKIP:-} ]] && { step_skip "$MIRROR_SKIP"; return 0; }; return 1; }
_m_figure() { printf '%s\t%s\n' "$1" "$2" >>"$X/mirror-figures.tsv"; echo "FIGURE $1: $2 s"; }
# m_req ACTION BOX [ARGS]: the host acts on a box
m_req() { guest_request mirror "$*" 60 || fail "host side: mirror $* failed (status $?)"; }
# m_status BOX FIELD: a field of BOX's `ebof ctl ns mirror status --json` (jq path, e.g. .role)
m_status() {
	guest_request mirror "status $1" 60 >/dev/null 2>&1 || return 1
	jq -r "$2" "$X/mirror-status.json"
}
_m_status_is() { [[ $(m_status "$1" "$2") == "$3" ]]; }
# the ANA state of the path through controller CTRL (the hidden per-path device nvmeXcYn1)
m_ana() {
	local p
	for p in /sys/block/nvme*c*n*; do
		[[ -e $p/ana_state ]] || continue
		[[ $(basename "$(readlink -f "$p/device")") == "$1" ]] || continue
		cat "$p/ana_state"
		return 0
	done
	echo none
}
_m_ana_is() { [[ $(m_ana "${M_CTRL[$1]}") == "$2" ]]; }
_m_state_is() { [[ $(cat "/sys/class/nvme/${M_CTRL[$1]}/state" 2>/dev/null || echo gone) == "$2" ]]; }
# the controller of MIRROR_NQN whose address is BOX's
m_ctrl_of() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) == "$M_NQN" ]] || continue
		grep -q "traddr=${M_IP[$1]}," "$c/address" 2>/dev/null && { basename "$c"; return 0; }
	done
	return 1
}
# m_fio NAME [ARGS]: fio on the head device with crc32c headers, write then verify
m_fio() {
	local name=$1
	shift
	run -t 300 fio --name="m-$name" --filename="$M_DEV" --ioengine=libaio --direct=1 --rw=randwrite \
		--bs=16k --iodepth=8 --size="$M_SIZE" --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--randseed=3400 --group_reporting --eta=never "$@"
}

m_connect() {
	_m_skip && return 0
	local box
	for box in A B; do
		run -t 60 nvme connect -t tcp -a "${M_IP[$box]}" -s "$M_PORT" -n "$M_NQN" --hostnqn="$M_HOST" \
			--hostid="$M_HOSTID" --reconnect-delay=1 --ctrl-loss-tmo=600 --keep-alive-tmo=5
		wait_for 20 m_ctrl_of "$box" >/dev/null || fail "no controller for box $box"
		M_CTRL[$box]=$(m_ctrl_of "$box")
	done
	wait_for 20 _nvme_has_ns "$M_NQN" 1 || fail "no head device for $M_NQN"
	M_DEV=/dev/$(nvme_ns_for "$M_NQN" 1)
	run nvme list-subsys
	[[ $(nvme list-subsys -o json | jq "[.. | objects | select(.NQN? == \"$M_NQN\")] | length") == 1 ]] ||
		fail "nvme list-subsys: not exactly one subsystem $M_NQN"
	wait_for 10 _m_ana_is A optimized || fail "path A is $(m_ana "${M_CTRL[A]}"), not optimized"
	wait_for 10 _m_ana_is B inaccessible || fail "path B is $(m_ana "${M_CTRL[B]}"), not inaccessible"
	echo "head $M_DEV; A ${M_CTRL[A]} optimized, B ${M_CTRL[B]} inaccessible"
}

# m_failover_under_fio SIGNAL OLD NEW: fio writes (rate-limited: ~8 s) while OLD gets SIGNAL;
# fio must pass; NEW's path becomes optimized; the stall fio saw is a figure
m_failover_under_fio() {
	local sig=$1 old=$2 new=$3 pid rc=0 t0 out=$X/m-fio-$1.json
	run -t 300 fio --name=m-$sig --filename="$M_DEV" --ioengine=libaio --direct=1 --rw=randwrite \
		--bs=16k --iodepth=8 --size="$M_SIZE" --verify=crc32c --verify_fatal=1 --do_verify=0 \
		--randseed=3400 --rate=4m --eta=never --output-format=json --output="$out" &
	pid=$!
	sleep 3
	t0=$(_us)
	m_req "$sig" "$old"
	wait_for "$M_SECS" _m_ana_is "$new" optimized ||
		fail "path $new is $(m_ana "${M_CTRL[$new]}") $M_SECS s after $sig of $old, not optimized"
	_m_figure "$sig $old -> path $new optimized (host's view)" "$(_secs $(($(_us) - t0)))"
	wait "$pid" || rc=$?
	((rc == 0)) || { cat "$out" 2>/dev/null | head -50; fail "fio failed across the $sig of $old (status $rc)"; }
	_m_figure "$sig $old: longest write completion (fio clat max)" \
		"$(jq -r '.jobs[0].write.clat_ns.max / 1e9' "$out")"
	# everything fio wrote reads back, through the new primary
	m_fio "verify-$sig" --verify_only
}

m_kill_primary() {
	_m_skip && return 0
	m_fio base # data on both copies before the failure
	m_failover_under_fio kill A B
}

m_restart_as_secondary() {
	_m_skip && return 0
	local t0
	m_req restart A
	wait_for "$M_SECS" _m_status_is A .role secondary || fail "A came back as $(m_status A .role), not secondary"
	t0=$(_us)
	wait_for 120 _m_status_is B "$M_STATE" in-sync || fail "B's peer is $(m_status B "$M_STATE") after 120 s, not in-sync"
	_m_figure "A restarted: resync to in-sync" "$(_secs $(($(_us) - t0)))"
	wait_for "$M_SECS" _m_state_is A live || fail "the host did not reconnect path A"
	wait_for 10 _m_ana_is A inaccessible || fail "path A is $(m_ana "${M_CTRL[A]}"), not inaccessible"
}

m_kill_new_primary() {
	_m_skip && return 0
	local t0
	t0=$(_us)
	m_req kill B
	wait_for "$M_SECS" _m_ana_is A optimized || fail "A was not promoted within $M_SECS s"
	_m_figure "kill B (idle) -> path A optimized" "$(_secs $(($(_us) - t0)))"
	m_fio "verify-from-A" --verify_only
	m_req restart B
	wait_for "$M_SECS" _m_status_is B .role secondary || fail "B came back as $(m_status B .role)"
	wait_for 120 _m_status_is A "$M_STATE" in-sync || fail "A's peer is $(m_status A "$M_STATE"), not in-sync"
	wait_for "$M_SECS" _m_state_is B live || fail "the host did not reconnect path B"
}

m_pause_primary() {
	_m_skip && return 0
	local epoch_b
	m_failover_under_fio stop A B
	epoch_b=$(m_status B .epoch)
	m_req cont A
	# the resumed old primary completes no write: it is fenced or secondary, its epoch below B's
	wait_for "$M_SECS" _m_fenced_or_secondary A ||
		fail "A resumed as $(m_status A .role) (fenced $(m_status A .fenced)), not fenced/secondary"
	(($(m_status A .epoch) < epoch_b)) || [[ $(m_status A .role) == secondary ]] ||
		fail "A's epoch $(m_status A .epoch) is not below B's $epoch_b"
	m_fio "verify-after-cont" --verify_only
}
_m_fenced_or_secondary() {
	[[ $(m_status "$1" .role) == secondary || $(m_status "$1" .fenced) == true ]]
}

# reservations (issue 34 item 2: replicated, so a host's registration survives a failover)
M_RKEY=0xeb0f
m_resv_take() {
	_m_skip && return 0
	run -t 30 nvme resv-register "$M_DEV" -n 1 --nrkey=$M_RKEY --rrega=0
	run -t 30 nvme resv-acquire "$M_DEV" -n 1 --crkey=$M_RKEY --rtype=1 --racqa=0
	m_resv_holds "through A"
}
# the report (extended: 128-bit host IDs) shows Write Exclusive and our key
m_resv_holds() {
	local out
	out=$(nvme resv-report "$M_DEV" -n 1 --eds 2>&1) || fail "resv-report failed ($1): $out"
	echo "$out"
	grep -Eq 'rtype[[:space:]]*:[[:space:]]*1\b' <<<"$out" || fail "no Write Exclusive reservation $1"
	grep -Eiq 'rkey[[:space:]]*:[[:space:]]*(0x)?0*eb0f\b' <<<"$out" || fail "our key is not registered $1"
}
m_resv_after_failover() {
	_m_skip && return 0
	wait_for 10 _m_ana_is B optimized || fail "path B is not optimized"
	m_resv_holds "through B after the failover"
}

m_disconnect() {
	_m_skip && return 0
	nvme resv-release "$M_DEV" -n 1 --crkey=$M_RKEY --rtype=1 --rrela=0 >/dev/null 2>&1 || true
	nvme resv-register "$M_DEV" -n 1 --crkey=$M_RKEY --rrega=1 >/dev/null 2>&1 || true
	run nvme disconnect -n "$M_NQN"
	wait_for 20 _nvme_no_ctrl "$M_NQN" || fail "controllers of $M_NQN left after disconnect"
}

mirror_steps() {
	step "mirror: connect both paths (one subsystem, A optimized, B inaccessible)" m_connect
	step "mirror: register a key and reserve (Write Exclusive) through A" m_resv_take
	step "mirror: fio verify while the primary A is killed (kill -9)" m_kill_primary
	step "mirror: the registration and reservation hold through B" m_resv_after_failover
	step "mirror: A restarts as secondary and resyncs" m_restart_as_secondary
	step "mirror: the new primary B is killed, A promoted, verify from A" m_kill_new_primary
	step "mirror: the primary paused (SIGSTOP) under fio, resumed after the promotion" m_pause_primary
	step "mirror: disconnect" m_disconnect
}

if [[ ${GUEST_SCRIPT_NAME:-} == linux-mirror.guest.sh ]]; then
	mirror_steps
fi
