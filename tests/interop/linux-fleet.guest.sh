#!/bin/bash
# Guest half of linux-fleet.sh (trixie guest): three ebof boxes (BOX_IPS) and a Central Discovery
# Controller (CDC_IP) on the host side; here the stock host software: udevd, dbus-daemon,
# avahi-daemon, stafd and stacd, started by hand (no systemd) and stopped by PID. In order:
#   (a) empty stafd/stacd configuration: mDNS alone connects every box's subsystems
#   (c) stafd configured with box 1 only: its referrals bring boxes 2 and 3
#   (b) stafd configured with the CDC only: every box's subsystems; a subsystem added to box 2 live
#       is connected, removed is disconnected (stafd follows Discovery Log Page Change events)
#   (d) nvme discover -o json against the CDC; nvme dim against box 2 and the CDC
#   (f) LVM striped over the three boxes, XFS, db_bench; stafd's discovery controllers are the
#       same devices as when (b) started; disconnect, reconnect (through the CDC), data read back
#   (e) namespace masking: two host NQNs, different nvme list-ns
# Each check is a step of its own: a failing one is reported and the next ones still run (the
# script's status is 1 if any failed); a missing feature makes its step SKIP (listed in
# /xchg/skipped.txt; the host fails the scenario for them with EBOF_INTEROP_STRICT=1). How long the
# host took to follow each change: /xchg/seen.tsv. Daemon logs: /xchg/{stafd,stacd}-PHASE.log.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

read -r -a BOX_IPS <<<"${BOX_IPS:-10.77.0.11 10.77.0.12 10.77.0.13}"
CDC_IP=${CDC_IP:-10.77.0.10}
NQN_PREFIX=${NQN_PREFIX:-nqn.2026-11.io.ebof:fleet}
DISC_PORT=${DISC_PORT:-8009} IO_PORT=${IO_PORT:-4420}
DISC_NQN=nqn.2014-08.org.nvmexpress.discovery
BOX_NQNS=("$NQN_PREFIX-box1" "$NQN_PREFIX-box2" "$NQN_PREFIX-box3")
ALL_NQNS=("${BOX_NQNS[@]}")
[[ -z ${MASK_SKIP:-} ]] && ALL_NQNS+=("$MASK_NQN")
HOT_NQN=$NQN_PREFIX-hot
SEE=${SEE_SECS:-60}
HOSTNAME_=fleet-guest # the entity name a DIM registration carries (libnvme: the host name)
HOSTNQN=''
AEN_DISC_CHANGED=0x70f002
FAILED=0
PIDS=/run/fleet-pids # one file per daemon holding its PID (checks run in subshells); all stopped by PID
mkdir -p "$PIDS"
# started NAME PID: remember daemon NAME's PID; pid_of NAME: it (empty when not running)
started() { echo "$2" >"$PIDS/$1"; }
pid_of() { cat "$PIDS/$1" 2>/dev/null || true; }

# ---------------------------------------------------------------------------------------------
# steps that go on after a failure

# check TITLE FUNC [ARGS]: a numbered, timed step run in a subshell: status 0 = OK, 77 = SKIP
# (see skip), anything else = FAIL, and the script goes on with the next step
check() {
	local title=$1 rc=0
	shift
	STEP_NO=$((STEP_NO + 1)) STEP_TITLE=$title STEP_T0=$(_us)
	echo
	echo "==== [$STEP_NO] $title ===="
	("$@") || rc=$?
	case $rc in
	0) _step_end OK ;;
	77) _step_end SKIP ;;
	*)
		echo "!!!! FAILED: [$STEP_NO] $title (status $rc)"
		_step_end "FAIL(status $rc)"
		FAILED=$((FAILED + 1))
		;;
	esac
}
# skip MESSAGE: end the current check as SKIP (listed in skipped.txt)
skip() {
	echo "SKIPPED: $*"
	echo "[$STEP_NO] $STEP_TITLE: $*" >>"$X/skipped.txt"
	exit 77
}
# missing FEATURE_RE MESSAGE: skip, unless `ebof ctl --help` names the feature (it has landed, so
# its absence on the wire is a failure)
missing() {
	if [[ -x ${EBOF_BIN:-} ]] && "$EBOF_BIN" ctl --help 2>/dev/null | grep -qiE "$1"; then
		fail "$2 (but 'ebof ctl --help' mentions /$1/: the feature is there)"
	fi
	skip "$2"
}

# ---------------------------------------------------------------------------------------------
# helpers

# box_ctl BOX ARGS...: `ebof ctl ARGS` on box BOX (1..3, cdc) through the host; CTL_OUT, T_DONE
CTL_OUT='' T_DONE=''
box_ctl() {
	local rc=0
	guest_request box-ctl "$*" 60 >&2 || rc=$?
	T_DONE=$(_us)
	CTL_OUT=$(<"$X/ctl.out")
	if ((rc != 0)); then
		cat "$X/ctl.err"
		fail "ebof ctl $* failed (status $rc)"
	fi
}

# seen WHAT SINCE_US: record how long the host took (since SINCE_US) in /xchg/seen.tsv
seen() {
	local s
	s=$(_secs $(($(_us) - $2)))
	echo "host followed: $1 in $s s"
	printf '%s\t%s\n' "$1" "$s" >>"$X/seen.tsv"
}

# ctrl_live NQN [HOSTNQN]: a live controller (not a discovery one) of subsystem NQN (of host
# HOSTNQN when given); prints its name
ctrl_live() {
	local c sub st h
	for c in /sys/class/nvme/nvme*; do
		sub='' st='' h=''
		read -r sub 2>/dev/null <"$c/subsysnqn" || continue
		[[ $sub == "$1" ]] || continue
		read -r st 2>/dev/null <"$c/state" || continue
		[[ $st == live ]] || continue
		if [[ -n ${2:-} ]]; then
			read -r h 2>/dev/null <"$c/hostnqn" || continue
			[[ $h == "$2" ]] || continue
		fi
		echo "${c##*/}"
		return 0
	done
	return 1
}
# all_connected NQN...: every NQN has a live controller; the box subsystems their namespace 1 too
all_connected() {
	local n
	for n in "$@"; do
		ctrl_live "$n" >/dev/null || return 1
		[[ $n == "$MASK_NQN" || $n == "$HOT_NQN" ]] && continue
		_nvme_has_ns "$n" 1 || return 1
	done
}
no_ctrl() { ! nvme_ctrl_for "$1" >/dev/null; }
# missing_nqns NQN...: the ones without a live controller
missing_nqns() {
	local n out=()
	for n in "$@"; do ctrl_live "$n" >/dev/null || out+=("$n"); done
	echo "${out[*]}"
}

# dcs: the discovery controllers, one line each: "name cntlid state address" (sorted)
dcs() {
	local c sub
	for c in /sys/class/nvme/nvme*; do
		[[ -e $c/subsysnqn ]] || continue
		read -r sub <"$c/subsysnqn" || continue
		[[ $sub == "$DISC_NQN" ]] || continue
		echo "${c##*/} cntlid=$(<"$c/cntlid") $(<"$c/state") $(tr '\n' ' ' <"$c/address")"
	done | sort
}
# dc_for IP: the discovery controller connected to IP:DISC_PORT
dc_for() {
	dcs | awk -v a="traddr=$1,trsvcid=$DISC_PORT" 'index($0, a) { print $1; exit }'
}

topology() {
	echo "---- controllers ----"
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ -e $c/subsysnqn ]] || continue
		echo "  ${c##*/} $(<"$c/subsysnqn") $(<"$c/state") $(tr '\n' ' ' <"$c/address")"
	done
}

# ---------------------------------------------------------------------------------------------
# the daemons: udevd, dbus-daemon, avahi-daemon (once), stafd and stacd (per phase)

IFACE=''
base_daemons() {
	hostname "$HOSTNAME_"
	HOSTNQN=$(</etc/nvme/hostnqn)
	echo "host NQN $HOSTNQN, host ID $(cat /etc/nvme/hostid 2>/dev/null)"
	IFACE=$(ip -o -4 addr show | awk -v ip="$GUEST_IP/" 'index($4, ip) == 1 { print $2; exit }')
	[[ -n $IFACE ]] || fail "no interface with $GUEST_IP"
	run modprobe dm_mod
	run modprobe xfs
	nvme version
	echo "nvme-stas $(dpkg-query -W -f '${Version}' nvme-stas), avahi $(dpkg-query -W -f '${Version}' avahi-daemon)," \
		"lvm2 $(dpkg-query -W -f '${Version}' lvm2), xfsprogs $(dpkg-query -W -f '${Version}' xfsprogs)," \
		"rocksdb-tools $(dpkg-query -W -f '${Version}' rocksdb-tools)"
	# udev: nvme-stas follows the kernel's events (NVME_AEN, add, remove) through libudev. nvme-cli's
	# own autoconnect rules (they call systemctl) are masked: only nvme-stas connects here; and LVM's
	# autoactivation rule (the steps activate the volume group themselves).
	mkdir -p /etc/udev/rules.d /run/udev
	local r
	for r in /usr/lib/udev/rules.d/*nvmf* /usr/lib/udev/rules.d/69-lvm.rules; do
		[[ -e $r ]] && ln -sf /dev/null "/etc/udev/rules.d/${r##*/}"
	done
	/usr/lib/systemd/systemd-udevd >"$X/udevd.log" 2>&1 &
	started udevd $!
	# dbus: the system bus
	mkdir -p /run/dbus /var/lib/dbus
	dbus-uuidgen --ensure
	dbus-daemon --system --nofork --nopidfile >"$X/dbus.log" 2>&1 &
	started dbus $!
	wait_for 20 test -S /run/dbus/system_bus_socket || fail "no system bus socket after 20 s"
	# avahi on the fabric interface only, IPv4
	mkdir -p /run/avahi-daemon
	cat >/tmp/avahi-daemon.conf <<EOF
[server]
host-name=$HOSTNAME_
use-ipv4=yes
use-ipv6=no
allow-interfaces=$IFACE
ratelimit-interval-usec=1000000
ratelimit-burst=1000
[wide-area]
enable-wide-area=no
[publish]
publish-hinfo=no
publish-workstation=no
EOF
	avahi-daemon -f /tmp/avahi-daemon.conf --no-chroot --no-rlimits >"$X/avahi.log" 2>&1 &
	started avahi $!
	wait_for 30 dbus-send --system --print-reply --dest=org.freedesktop.Avahi / \
		org.freedesktop.Avahi.Server.GetVersionString >/dev/null 2>&1 ||
		{ tail -n 20 "$X/avahi.log"; fail "avahi-daemon not on the bus after 30 s"; }
	echo "udevd $(pid_of udevd), dbus-daemon $(pid_of dbus), avahi-daemon $(pid_of avahi) on $IFACE"
	# the kernel's asynchronous events, for the record (tracefs)
	mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
	echo 1 >/sys/kernel/tracing/events/nvme/nvme_async_event/enable 2>/dev/null || true
}

# stas_conf PHASE [CONTROLLER_IP...]: /etc/stas/stafd.conf and stacd.conf for a phase. No address:
# both files empty (every default: zeroconf enabled). Addresses: zeroconf disabled, stafd connects
# those discovery controllers only.
stas_conf() {
	local phase=$1 ip
	shift
	mkdir -p /etc/stas
	: >/etc/stas/stacd.conf
	if (($# == 0)); then
		: >/etc/stas/stafd.conf
	else
		{
			printf '[Service Discovery]\nzeroconf=disabled\n\n[Controllers]\n'
			for ip in "$@"; do printf 'controller=transport=tcp;traddr=%s;trsvcid=%s\n' "$ip" "$DISC_PORT"; done
		} >/etc/stas/stafd.conf
	fi
	echo "---- stafd.conf ($phase) ----"
	cat /etc/stas/stafd.conf
	echo "---- (stacd.conf: empty) ----"
}

# logged NAME LOG CMD...: CMD in the background, its output in LOG with each line prefixed by the
# guest's uptime (through a FIFO: the PID kept for NAME is CMD's own)
logged() {
	local name=$1 log=$2 fifo=/tmp/$1.fifo
	shift 2
	rm -f "$fifo" && mkfifo "$fifo"
	gawk '{ getline up <"/proc/uptime"; close("/proc/uptime"); split(up, u, " ")
		printf "%8.2f %s\n", u[1], $0; fflush() }' <"$fifo" >"$log" &
	"$@" >"$fifo" 2>&1 &
	started "$name" $!
}

STAS_T0=''
# stas_start PHASE: stafd and stacd in the background (logs /xchg/{stafd,stacd}-PHASE.log, each line
# prefixed by the guest's uptime); each phase has its own runtime directory, so no last known
# configuration carries over
stas_start() {
	local phase=$1
	mkdir -p "/run/stas-$phase/stafd" "/run/stas-$phase/stacd"
	STAS_T0=$(_us)
	echo "stafd and stacd start at uptime $(cut -d' ' -f1 /proc/uptime)"
	RUNTIME_DIRECTORY=/run/stas-$phase/stafd logged stafd "$X/stafd-$phase.log" stafd -f /etc/stas/stafd.conf
	RUNTIME_DIRECTORY=/run/stas-$phase/stacd logged stacd "$X/stacd-$phase.log" stacd -f /etc/stas/stacd.conf
	echo "stafd $(pid_of stafd), stacd $(pid_of stacd) ($phase)"
}

# stop NAME: SIGTERM the daemon NAME by its PID, wait up to 10 s, then SIGKILL
stop() {
	local pid i
	pid=$(pid_of "$1")
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$1 ($pid) still runs 10 s after SIGTERM: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
	rm -f "$PIDS/$1"
}

no_nvme_ctrl() { ! compgen -G '/sys/class/nvme/nvme*' >/dev/null; }
# stas_stop: stacd and stafd stopped (by PID); every NVMe controller disconnected
stas_stop() {
	stop stacd
	stop stafd
	run -t 60 nvme disconnect-all
	wait_for 30 no_nvme_ctrl || { topology; fail "controllers left after nvme disconnect-all"; }
}

# wait_all WHAT NQN...: wait up to $SEE s until every NQN is connected; records the time since
# stafd/stacd started
wait_all() {
	local what=$1
	shift
	if ! wait_for "$SEE" all_connected "$@"; then
		topology
		echo "---- stafd log (last 30 lines) ----"
		tail -n 30 "$X/stafd-$PHASE.log" || true
		echo "---- stacd log (last 30 lines) ----"
		tail -n 30 "$X/stacd-$PHASE.log" || true
		if [[ $PHASE == a ]]; then
			echo "---- what avahi sees of _nvme-disc._tcp ----"
			timeout 15 avahi-browse -rtp _nvme-disc._tcp || true
		fi
		fail "$what: not connected after $SEE s: $(missing_nqns "$@")"
	fi
	seen "$what: every subsystem connected after stafd/stacd started" "$STAS_T0"
	topology
}

# ---------------------------------------------------------------------------------------------
# (a) zero-config: mDNS alone

PHASE=''
# mdns_reference: the guest's avahi publishes the boxes' _nvme-disc._tcp records itself
# (EBOF_FLEET_MDNS=avahi: a reference run that checks the step, not ebof): boxN.local -> its
# address, and a service on it with SPDK's TXT record
mdns_reference() {
	local i ip
	for i in 1 2 3; do
		ip=${BOX_IPS[$((i - 1))]}
		avahi-publish -a -R "box$i.local" "$ip" >/dev/null 2>&1 &
		started "publish-a$i" $!
		avahi-publish -s -H "box$i.local" "ebof box$i" _nvme-disc._tcp "$DISC_PORT" p=tcp \
			"nqn=$DISC_NQN" >/dev/null 2>&1 &
		started "publish-s$i" $!
	done
	echo "reference run: the guest's avahi publishes _nvme-disc._tcp for the three boxes"
}

phase_mdns() {
	PHASE=a
	if [[ ${MDNS_REFERENCE:-} == avahi ]]; then
		mdns_reference
	else
		[[ -x ${EBOF_BIN:-} ]] || skip "no ebof binary in the guest"
		grep -qa '_nvme-disc' "$EBOF_BIN" ||
			skip "this ebof does not publish _nvme-disc._tcp over mDNS (TP 8009) yet"
	fi
	stas_conf a
	stas_start a
	wait_all "(a) mDNS, empty configuration" "${ALL_NQNS[@]}"
	echo "---- avahi-browse -rtp _nvme-disc._tcp ----"
	run -t 20 avahi-browse -rtp _nvme-disc._tcp || true
	echo "---- discovery controllers stafd connected ----"
	dcs
	local ip
	for ip in "${BOX_IPS[@]}"; do
		[[ -n $(dc_for "$ip") ]] || fail "stafd has no discovery controller on box $ip (found through mDNS)"
	done
	[[ -z $(dc_for "$CDC_IP") ]] || fail "stafd connected the CDC ($CDC_IP), which does not publish itself (mdns = false)"
}

# ---------------------------------------------------------------------------------------------
# (c) referrals: box 1 refers to boxes 2 and 3

phase_referrals() {
	PHASE=c
	local log n
	log=$(run -t 60 nvme discover -t tcp -a "${BOX_IPS[0]}" -s "$DISC_PORT" -o json)
	n=$(jq '[.records[]? | select(.subtype | test("referral"))] | length' <<<"$log")
	echo "box 1's discovery log: $(jq '.records | length' <<<"$log") records, $n referrals"
	jq -c '.records[]? | {subtype, traddr, trsvcid, subnqn}' <<<"$log"
	((n > 0)) || missing 'referral' "box 1 serves no referral entry although [discovery] referrals lists boxes 2 and 3"
	((n == 2)) || fail "box 1's log has $n referral entries, expected 2 (boxes 2 and 3)"
	stas_conf c "${BOX_IPS[0]}"
	stas_start c
	wait_all "(c) referrals, configured with box 1 only" "${ALL_NQNS[@]}"
	dcs
	local ip
	for ip in "${BOX_IPS[@]:1}"; do
		[[ -n $(dc_for "$ip") ]] || fail "stafd did not follow box 1's referral to $ip"
	done
}

# ---------------------------------------------------------------------------------------------
# (b) the CDC alone, live changes followed

phase_cdc() {
	PHASE=b
	if [[ -n ${CDC_SKIP:-} ]]; then
		# still start stafd/stacd (on every box's discovery controller, as works without a CDC) so
		# that the live changes, (d), (f) run
		stas_conf b "${BOX_IPS[@]}"
		stas_start b
		wait_all "(b) baseline, configured with every box" "${ALL_NQNS[@]}"
		dcs >/tmp/dcs-before
		skip "no Central Discovery Controller in this ebof ($CDC_SKIP); stafd was given every box instead"
	fi
	stas_conf b "$CDC_IP"
	stas_start b
	wait_all "(b) configured with the CDC only" "${ALL_NQNS[@]}"
	dcs | tee /tmp/dcs-before
	[[ -n $(dc_for "$CDC_IP") ]] || fail "stafd has no discovery controller on the CDC"
	[[ $(</sys/class/nvme/"$(dc_for "$CDC_IP")"/dctype) == cdc ]] ||
		fail "the CDC's discovery controller reports dctype '$(</sys/class/nvme/"$(dc_for "$CDC_IP")"/dctype)', not cdc"
	touch /tmp/cdc-works # (f) reconnects through the CDC
}

live_changes() {
	[[ -n $(pid_of stafd) ]] || fail "stafd does not run (the previous step failed)"
	local via=CDC aen0 aen1 t
	[[ -n ${CDC_SKIP:-} ]] && via="box 2's own discovery controller (no CDC)"
	aen0=$(grep -c "Received AEN: $AEN_DISC_CHANGED" "$X/stafd-b.log" || true)
	box_ctl 2 subsystem add "$HOT_NQN"
	t=$T_DONE
	if ! wait_for "$SEE" ctrl_live "$HOT_NQN" >/dev/null; then
		topology
		tail -n 30 "$X/stafd-b.log" "$X/stacd-b.log"
		fail "$HOT_NQN, added to box 2, not connected after $SEE s (via $via)"
	fi
	seen "(b) subsystem added to box 2 -> connected (via $via)" "$t"
	box_ctl 2 subsystem remove "$HOT_NQN"
	t=$T_DONE
	if ! wait_for "$SEE" no_ctrl "$HOT_NQN"; then
		topology
		tail -n 30 "$X/stafd-b.log" "$X/stacd-b.log"
		fail "$HOT_NQN, removed from box 2, still has a controller after $SEE s (via $via)"
	fi
	seen "(b) subsystem removed from box 2 -> disconnected (via $via)" "$t"
	aen1=$(grep -c "Received AEN: $AEN_DISC_CHANGED" "$X/stafd-b.log" || true)
	echo "stafd logged $((aen1 - aen0)) Discovery Log Page Change events (AEN $AEN_DISC_CHANGED) meanwhile"
	((aen1 > aen0)) || fail "stafd received no Discovery Log Page Change event"
	all_connected "${ALL_NQNS[@]}" || fail "lost a box subsystem meanwhile: $(missing_nqns "${ALL_NQNS[@]}")"
	[[ -z ${CDC_SKIP:-} ]] || skip "followed through box 2's own discovery controller; no CDC in this ebof ($CDC_SKIP)"
}

# ---------------------------------------------------------------------------------------------
# (d) nvme discover against the CDC, DIM

cdc_discover() {
	[[ -z ${CDC_SKIP:-} ]] || skip "no Central Discovery Controller in this ebof ($CDC_SKIP)"
	local log n missing=()
	log=$(run -t 60 nvme discover -t tcp -a "$CDC_IP" -s "$DISC_PORT" -o json)
	jq -c '.records[]? | {subtype, traddr, trsvcid, subnqn}' <<<"$log"
	for n in "${ALL_NQNS[@]}"; do
		jq -e --arg n "$n" '[.records[]? | select(.subnqn == $n and (.subtype | test("nvme")))] | length > 0' \
			<<<"$log" >/dev/null || missing+=("$n")
	done
	((${#missing[@]} == 0)) || fail "the CDC's log lacks ${missing[*]}"
	echo "the CDC lists all ${#ALL_NQNS[@]} subsystems of the boxes"
}

# registered BOX: `ebof ctl show --json` on BOX lists this host's DIM registration: the entity name
# (host name) anywhere, or the host NQN under a key that names registrations
registered() {
	box_ctl "$1" --json show
	grep -q "$HOSTNAME_" <<<"$CTL_OUT" && return 0
	jq -e --arg h "$HOSTNQN" '[.. | objects | to_entries[] | select(.key | test("regist|dim"; "i")) |
		.value | tostring | contains($h)] | any' <<<"$CTL_OUT" >/dev/null
}

# dim TASK DEV: nvme dim; DIM_OUT is what it printed
DIM_OUT=''
dim() {
	local rc=0
	DIM_OUT=$(run -t 30 nvme dim -d "$2" -t "$1" 2>&1) || rc=$?
	echo "$DIM_OUT"
	if ((rc != 0)) || grep -qiE 'fail|error|invalid' <<<"$DIM_OUT"; then
		missing 'dim|regist' "no DIM in this ebof yet: nvme dim -t $1 answered '$(grep -oE 'Status:[^:]*:[^:]*' <<<"$DIM_OUT" | head -n 1)'"
	fi
}

dim_box() {
	local dc made='' ip=${BOX_IPS[1]}
	dc=$(dc_for "$ip")
	if [[ -z $dc ]]; then
		run -t 60 nvme discover -t tcp -a "$ip" -s "$DISC_PORT" -p >/dev/null
		dc=$(dc_for "$ip") made=1
		[[ -n $dc ]] || fail "no persistent discovery controller on box 2 after nvme discover -p"
	fi
	echo "box 2's discovery controller: $dc (dctype $(<"/sys/class/nvme/$dc/dctype")${made:+, made here})"
	if registered 2; then # stafd registers with every DDC it connects
		echo "box 2 lists the host already (stafd registered): deregister first"
		dim deregister "$dc"
		! registered 2 || fail "box 2 still lists the host after nvme dim -t deregister"
	fi
	dim register "$dc"
	registered 2 || { echo "$CTL_OUT"; fail "box 2's ebof ctl show does not list the host after nvme dim -t register"; }
	echo "box 2 lists the registration"
	[[ -z $made ]] || run -t 30 nvme disconnect -d "$dc"
}

dim_cdc() {
	[[ -z ${CDC_SKIP:-} ]] || skip "no Central Discovery Controller in this ebof ($CDC_SKIP)"
	local dc
	dc=$(dc_for "$CDC_IP")
	[[ -n $dc ]] || fail "no discovery controller on the CDC"
	if registered cdc; then echo "the CDC lists the host already (stafd registered)"; fi
	dim register "$dc"
	registered cdc || { echo "$CTL_OUT"; fail "the CDC's ebof ctl show does not list the host after nvme dim -t register"; }
	echo "the CDC lists the registration"
}

# ---------------------------------------------------------------------------------------------
# (f) LVM over the three boxes, XFS, RocksDB

export LVM_SYSTEM_DIR=/tmp/lvm DM_DISABLE_UDEV=1
lvm_setup() {
	mkdir -p /tmp/lvm /run/lock/lvm /run/lvm
	cat >/tmp/lvm/lvm.conf <<'EOF'
devices {
	use_devicesfile = 0
	obtain_device_list_from_udev = 0
	filter = [ "a|^/dev/nvme[0-9]+n[0-9]+$|", "r|.*|" ]
}
activation {
	udev_sync = 0
	udev_rules = 0
	monitoring = 0
}
EOF
}
box_devs() {
	local n
	for n in "${BOX_NQNS[@]}"; do echo "/dev/$(nvme_ns_for "$n" 1)"; done | xargs
}
DB=/mnt/fleet/rocksdb
DB_ARGS=("--db=$DB" --num=4000 --value_size=256 --compression_type=none --threads=1 --histogram=0
	--statistics=0 --disable_wal=0 --sync=0 --cache_size=1048576 --seed=4420)

lvm_db() {
	if ! all_connected "${BOX_NQNS[@]}"; then
		# (b) failed: connect the boxes directly, so that this step still runs
		echo "NOTE: (b) left $(missing_nqns "${BOX_NQNS[@]}") unconnected: connecting every box directly"
		stas_stop
		local ip
		for ip in "${BOX_IPS[@]}"; do run -t 120 nvme connect-all -t tcp -a "$ip" -s "$DISC_PORT"; done
		wait_for "$SEE" all_connected "${BOX_NQNS[@]}" || fail "boxes not connected: $(missing_nqns "${BOX_NQNS[@]}")"
	fi
	lvm_setup
	local devs
	devs=$(box_devs)
	echo "the three boxes' namespaces: $devs"
	# shellcheck disable=SC2086 # one word per device
	run -t 60 pvcreate -ff -y $devs
	# shellcheck disable=SC2086
	run -t 60 vgcreate fleet $devs
	run -t 60 lvcreate -Zn -y -i 3 -I 64k -l 100%FREE -n db fleet
	run -t 30 lvs -o lv_name,lv_size,stripes,stripe_size,devices fleet
	run -t 120 mkfs.xfs -q -f -K /dev/mapper/fleet-db
	mkdir -p /mnt/fleet
	run -t 60 mount /dev/mapper/fleet-db /mnt/fleet
	run -t 240 db_bench "${DB_ARGS[@]}" --benchmarks=fillseq,readrandom --reads=2000 --use_existing_db=0 |
		tee /tmp/db_bench-1.txt | grep -E '^(fillseq|readrandom)' || true
	grep -qE '^readrandom .*\(2000 of 2000 found\)' /tmp/db_bench-1.txt ||
		{ tail -n 20 /tmp/db_bench-1.txt; fail "db_bench readrandom did not find its 2000 keys"; }
	head -c 8M /dev/urandom >/mnt/fleet/blob
	sync
	(cd /mnt/fleet && find . -type f ! -name LOG ! -name 'LOG.old*' -print0 | sort -z | xargs -0 sha256sum) \
		>/tmp/fleet.sha256
	echo "$(wc -l </tmp/fleet.sha256) files checksummed ($(du -sh /mnt/fleet | cut -f1))"
	df -h /mnt/fleet
}

persistent_dcs() {
	[[ -s /tmp/dcs-before ]] || fail "no record of the discovery controllers from (b)"
	[[ -n $(pid_of stafd) ]] || fail "stafd does not run"
	dcs >/tmp/dcs-after
	echo "when (b) connected:"
	cat /tmp/dcs-before
	echo "now:"
	cat /tmp/dcs-after
	# every one of (b)'s is still there: the same device, controller ID (no reconnect) and state
	# (one that a failed step of (d) left behind may be extra)
	local gone ev
	gone=$(comm -23 /tmp/dcs-before /tmp/dcs-after)
	[[ -z $gone ]] || fail "stafd's discovery controllers changed (reconnects or lost): $gone"
	grep -v ' live ' /tmp/dcs-before && fail "a discovery controller is not live"
	ev=$(grep -c "Received AEN: $AEN_DISC_CHANGED" "$X/stafd-b.log" || true)
	echo "the same $(wc -l </tmp/dcs-before) discovery controllers, all live; stafd received $ev Discovery Log Page Change events"
}

reconnect_readback() {
	mountpoint -q /mnt/fleet || fail "/mnt/fleet is not mounted (the LVM step failed)"
	run -t 60 umount /mnt/fleet
	run -t 60 vgchange -an fleet
	stas_stop
	echo "every controller disconnected"
	local t
	t=$(_us)
	if [[ -e /tmp/cdc-works ]]; then
		# a host that uses the CDC never needs a box's address
		run -t 120 nvme connect-all -t tcp -a "$CDC_IP" -s "$DISC_PORT"
	else
		local ip
		for ip in "${BOX_IPS[@]}"; do run -t 120 nvme connect-all -t tcp -a "$ip" -s "$DISC_PORT"; done
	fi
	wait_for "$SEE" all_connected "${BOX_NQNS[@]}" ||
		{ topology; fail "the boxes did not come back: $(missing_nqns "${BOX_NQNS[@]}")"; }
	local via=" (every box)"
	[[ ! -e /tmp/cdc-works ]] || via=" (the CDC)"
	seen "(f) reconnected with nvme connect-all$via" "$t"
	echo "the three boxes' namespaces now: $(box_devs)"
	run -t 60 vgchange -ay fleet
	run -t 60 mount /dev/mapper/fleet-db /mnt/fleet
	(cd /mnt/fleet && run -t 120 sha256sum --quiet -c /tmp/fleet.sha256) || fail "data changed across the reconnect"
	echo "$(wc -l </tmp/fleet.sha256) files read back identical"
	run -t 240 db_bench "${DB_ARGS[@]}" --benchmarks=readrandom --reads=2000 --use_existing_db=1 |
		tee /tmp/db_bench-2.txt | grep -E '^readrandom' || true
	grep -qE '^readrandom .*\(2000 of 2000 found\)' /tmp/db_bench-2.txt ||
		{ tail -n 20 /tmp/db_bench-2.txt; fail "db_bench readrandom after the reconnect did not find its 2000 keys"; }
	run -t 60 umount /mnt/fleet
	run -t 60 vgchange -an fleet
	run -t 60 nvme disconnect-all
	wait_for 30 no_nvme_ctrl || { topology; fail "controllers left after nvme disconnect-all"; }
}

# ---------------------------------------------------------------------------------------------
# (e) masking

nsids() { # nsids CTRL: the active namespace list (nvme list-ns)
	local h
	run nvme list-ns "/dev/$1" | sed -n 's/^\[ *[0-9]*\]:0x\([0-9a-fA-F]*\)$/\1/p' |
		while read -r h; do echo $((16#$h)); done | sort -n | xargs
}
masking() {
	[[ -z ${MASK_SKIP:-} ]] || skip "no per-host namespace masking in this ebof ($MASK_SKIP)"
	local ip=${BOX_IPS[2]} a b la lb
	run -t 60 nvme connect -t tcp -a "$ip" -s "$IO_PORT" -n "$MASK_NQN" --hostnqn="$HOST_A" --hostid="$HOST_A_ID"
	run -t 60 nvme connect -t tcp -a "$ip" -s "$IO_PORT" -n "$MASK_NQN" --hostnqn="$HOST_B" --hostid="$HOST_B_ID"
	wait_for 20 ctrl_live "$MASK_NQN" "$HOST_A" >/dev/null || fail "no live controller for host A"
	wait_for 20 ctrl_live "$MASK_NQN" "$HOST_B" >/dev/null || fail "no live controller for host B"
	a=$(ctrl_live "$MASK_NQN" "$HOST_A") b=$(ctrl_live "$MASK_NQN" "$HOST_B")
	la=$(nsids "$a") lb=$(nsids "$b")
	echo "host A ($a): nvme list-ns [$la]; host B ($b): nvme list-ns [$lb]"
	[[ $la == "1 3" ]] || fail "host A sees [$la], expected [1 3]"
	[[ $lb == "2 3" ]] || fail "host B sees [$lb], expected [2 3]"
	run -t 30 nvme disconnect -d "$a"
	run -t 30 nvme disconnect -d "$b"
}

# ---------------------------------------------------------------------------------------------
# (g) discovery DH-HMAC-CHAP: box 3 has a secret for host C

# fabrics_add OPTIONS: create a controller through /dev/nvme-fabrics; prints the kernel's answer
# (instance=N,cntlid=M)
fabrics_add() {
	local fd line rc=0
	exec {fd}<>/dev/nvme-fabrics || return 1
	printf '%s' "$1" >&"$fd" || rc=$?
	((rc == 0)) && read -r line <&"$fd"
	exec {fd}>&-
	((rc == 0)) && echo "$line"
	return "$rc"
}

discovery_auth() {
	local ip=${BOX_IPS[2]} out rc=0 opts inst
	out=$(run -t 60 nvme discover -t tcp -a "$ip" -s "$DISC_PORT" --hostnqn="$HOST_C" --hostid="$HOST_C_ID" 2>&1) || rc=$?
	echo "$out"
	if ((rc == 0)) && grep -q "$NQN_PREFIX-box3" <<<"$out"; then
		fail "box 3 served host C's discovery log without its DH-HMAC-CHAP secret"
	fi
	echo "without the secret: refused (status $rc)"
	# nvme-cli 2.13's discover does not hand --dhchap-secret to the kernel for a discovery
	# controller (the kernel logs "qid 0: no key"); informative only
	rc=0
	out=$(run -t 60 nvme discover -t tcp -a "$ip" -s "$DISC_PORT" --hostnqn="$HOST_C" --hostid="$HOST_C_ID" \
		--dhchap-secret="$HOST_C_KEY" 2>&1) || rc=$?
	grep -q "$NQN_PREFIX-box3" <<<"$out" && echo "nvme discover --dhchap-secret: listed box 3" ||
		echo "NOTE: nvme discover --dhchap-secret did not authenticate (status $rc): $(tail -n 1 <<<"$out")"
	# The kernel with the secret, as nvme-cli passes it for nvme connect: a discovery controller
	# that authenticates, then its log
	opts="transport=tcp,traddr=$ip,trsvcid=$DISC_PORT,nqn=nqn.2014-08.org.nvmexpress.discovery"
	opts+=",hostnqn=$HOST_C,hostid=$HOST_C_ID,dhchap_secret=$HOST_C_KEY"
	out=$(fabrics_add "$opts") || fail "the kernel could not create an authenticated discovery controller on box 3 (see dmesg)"
	inst=$(sed -n 's/.*instance=\([0-9]*\).*/\1/p' <<<"$out")
	[[ -n $inst ]] || fail "no instance in the kernel's answer '$out'"
	echo "authenticated discovery controller nvme$inst"
	out=$(run -t 60 nvme discover -d "nvme$inst" 2>&1) || rc=$?
	echo "$out"
	run -t 30 nvme disconnect -d "nvme$inst" >/dev/null || true
	grep -q "$NQN_PREFIX-box3" <<<"$out" || fail "the authenticated discovery controller's log does not list box 3"
}

# ---------------------------------------------------------------------------------------------

finish() {
	local rc=$1 n
	for n in stacd stafd publish-a1 publish-s1 publish-a2 publish-s2 publish-a3 publish-s3 avahi dbus udevd; do
		stop "$n"
	done
	cp /sys/kernel/tracing/trace "$X/nvme-aen-trace.txt" 2>/dev/null || true
	_on_exit "$rc"
}
trap 'finish $?' EXIT

step "start udevd, dbus-daemon, avahi-daemon" base_daemons
check "(a) empty stafd/stacd configuration: mDNS alone connects every box" phase_mdns
check "reset: stop stafd/stacd, disconnect everything" stas_stop
check "(c) stafd with box 1 only: its referrals bring boxes 2 and 3" phase_referrals
check "reset: stop stafd/stacd, disconnect everything" stas_stop
check "(b) stafd with the CDC only: every box's subsystems" phase_cdc
# stafd/stacd of (b) go on running until (f) disconnects: the steps below run on them
check "(b) a subsystem added to box 2 live is connected, removed is disconnected" live_changes
check "(d) nvme discover -o json against the CDC lists every box's subsystems" cdc_discover
check "(d) nvme dim against box 2 registers the host (ebof ctl show)" dim_box
check "(d) nvme dim against the CDC registers the host (ebof ctl show)" dim_cdc
check "(f) LVM striped over the three boxes, XFS, db_bench" lvm_db
check "stafd's persistent discovery connections unchanged since (b)" persistent_dcs
check "(f) disconnect, reconnect, the data reads back" reconnect_readback
check "(e) masking: two host NQNs see different nvme list-ns" masking
check "(g) nvme discover --dhchap-secret: box 3 authenticates host C's discovery" discovery_auth
echo
echo "---- $FAILED check(s) failed ----"
((FAILED == 0))
