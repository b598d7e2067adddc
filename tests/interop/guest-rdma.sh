# shellcheck shell=bash
# Guest helpers for the NVMe over RDMA scenarios (linux-rdma, linux-rdma2): soft-RoCE (rdma_rxe) on
# the guest's virtio-net interface, the kernel's nvmet-rdma through configfs, and the checks for
# whether $EBOF_BIN knows RDMA yet. Sourced by the guest scripts after guest-lib.sh (vm_start copies
# it to /xchg/guest-rdma.sh).
#
#   rdma_modules                 modprobe rdma_rxe, ib_uverbs, rdma_ucm, nvme-rdma, nvmet, nvmet-rdma
#   rxe_add                      `rdma link add rxe0 type rxe netdev IFACE`; waits for PORT_ACTIVE;
#                                ibv_devices / ibv_devinfo must show it; prints the RoCE v2 GID
#   rdma_listening IP PORT       an RDMA CM id listens on IP:PORT (`rdma resource show cm_id`)
#   kt_rdma_up NQN IP PORT DEV   nvmet: subsystem NQN (any host), namespace 1 = DEV, port 1 = rdma
#   kt_rdma_down NQN             remove that configuration again (port, link, namespace, subsystem)
#   ebof_knows_rdma_host         `ebof discover --help` has a -t/--transport option
#   ebof_serve_rdma_check CONFIG `ebof serve --config CONFIG --print-config` accepts an RDMA
#                                listener: 0 yes, 77 no (the error names the transport), else 1
#   rdma_discover NQN            nvme discover -t rdma $TARGET_IP:$TARGET_PORT must list NQN (RDMA entry)
#   rdma_connect NQN             nvme connect -t rdma (nvme_connect), nvme list, queue count
#   serve_rdma_conf CONF IP PORT NQN SIZE    write CONF: an RDMA listener, NQN with a RAM namespace
#   serve_rdma_check CONF IP PORT NQN SIZE   serve_rdma_conf, then ebof serve must accept it: SERVE=1,
#                                or ebof_missing when it rejects the transport
#   serve_rdma_start CONF LOG IP PORT   start `ebof serve` (SERVE_PID) and wait for its RDMA listener
#   serve_rdma_stop LOG          SIGTERM, wait, and no panic in LOG
#   ebof_missing MESSAGE         step_skip MESSAGE; under EBOF_INTEROP_STRICT the step is MISSING and
#                                strict_verdict (the last step) fails
#   rdma_ctrl_facts              what the kernel host sees of an RDMA controller (id-ctrl fields)

NVMET=/sys/kernel/config/nvmet
RXE_DEV=${RXE_DEV:-rxe0}
EBOF=${EBOF_BIN:-} # /ebof/ebof (lib.sh's copy of the host's binary), empty when the host had none
SERVE=0 SERVE_PID=''
export NVME_TRANSPORT=rdma

rdma_modules() {
	local m
	# rdma_rxe: soft-RoCE; ib_uverbs + rdma_ucm: /dev/infiniband/uverbs0 and rdma_cm for userspace
	# verbs (ibv_devices, rping, ebof); nvme-rdma: the host; nvmet-rdma: the kernel's target
	for m in rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma; do
		run modprobe "$m"
	done
	lsmod | awk 'NR > 1 && $1 ~ /rdma|^ib_|^iw_|nvme/ { print "  " $1 " (used by " ($4 == "" ? "-" : $4) ")" }'
}

_net_iface() {
	local n
	for n in /sys/class/net/*; do
		n=${n##*/}
		[[ $n != lo ]] && echo "$n" && return 0
	done
	return 1
}
_rxe_active() { [[ $(cat "/sys/class/infiniband/$RXE_DEV/ports/1/state" 2>/dev/null) == *ACTIVE* ]]; }

rxe_add() {
	local iface gid
	iface=$(_net_iface) || fail "no network interface"
	run rdma link add "$RXE_DEV" type rxe netdev "$iface"
	wait_for 10 _rxe_active || fail "$RXE_DEV port 1 not ACTIVE: $(cat "/sys/class/infiniband/$RXE_DEV/ports/1/state" 2>&1)"
	run rdma link show
	run ibv_devices | tee /tmp/ibv_devices.txt
	grep -qw "$RXE_DEV" /tmp/ibv_devices.txt || fail "ibv_devices does not list $RXE_DEV"
	run ibv_devinfo -d "$RXE_DEV" | grep -E 'hca_id|transport|state|active_mtu|link_layer'
	[[ -e /dev/infiniband/rdma_cm && -e /dev/infiniband/uverbs0 ]] ||
		fail "no /dev/infiniband/{rdma_cm,uverbs0}: $(ls /dev/infiniband 2>&1)"
	# GID index 1 is the IPv4-mapped one; its type must be RoCE v2 (UDP port 4791)
	gid=$(cat "/sys/class/infiniband/$RXE_DEV/ports/1/gids/1")
	echo "GID[1] $gid ($(cat "/sys/class/infiniband/$RXE_DEV/ports/1/gid_attrs/types/1"))," \
		"netdev $(cat "/sys/class/infiniband/$RXE_DEV/ports/1/gid_attrs/ndevs/1")," \
		"RLIMIT_MEMLOCK $(ulimit -l)"
}

# rdma_listening IP PORT: an RDMA CM id (kernel or userspace: `rdma resource show cm_id` lists both,
# with the owner's comm) is in state LISTEN on IP:PORT, or on the wildcard address and PORT
rdma_listening() {
	rdma resource show cm_id 2>/dev/null | grep 'state LISTEN' |
		grep -qE "src-addr (${1//./\\.}|0\.0\.0\.0|::):$2( |\$)"
}

# rping IP PORT: librdmacm/libibverbs from userspace, server and client on the guest's own address
rping_check() {
	local ip=$1 port=${2:-7174} pid
	timeout -k 5 60 rping -s -a "$ip" -p "$port" -C 3 -S 64 >/tmp/rping-server.txt 2>&1 &
	pid=$!
	wait_for 10 rdma_listening "$ip" "$port" || fail "rping server does not listen on $ip:$port"
	run -t 60 rping -c -a "$ip" -p "$port" -C 3 -S 64 -v
	wait "$pid" || fail "rping server failed: $(cat /tmp/rping-server.txt)"
}

kt_rdma_up() {
	local nqn=$1 ip=$2 port=$3 dev=$4 s=$NVMET/subsystems/$1 p=$NVMET/ports/1
	mkdir "$s"
	echo 1 >"$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n "$dev" >"$s/namespaces/1/device_path"
	echo 1 >"$s/namespaces/1/enable"
	mkdir "$p"
	echo rdma >"$p/addr_trtype"
	echo ipv4 >"$p/addr_adrfam"
	echo "$ip" >"$p/addr_traddr"
	echo "$port" >"$p/addr_trsvcid"
	ln -s "$s" "$p/subsystems/$nqn"
	wait_for 10 rdma_listening "$ip" "$port" || fail "nvmet-rdma does not listen on $ip:$port"
	run rdma resource show cm_id
	echo "nvmet: $nqn, namespace 1 = $dev, port 1 = rdma $ip:$port, any host"
}

kt_rdma_down() {
	local nqn=$1 s=$NVMET/subsystems/$1 p=$NVMET/ports/1
	rm -f "$p/subsystems/$nqn"
	rmdir "$p"
	echo 0 >"$s/namespaces/1/enable"
	rmdir "$s/namespaces/1"
	rmdir "$s"
	echo "nvmet configuration removed"
}

# The host tools know RDMA once `ebof discover --help` offers -t/--transport.
ebof_knows_rdma_host() {
	[[ -x $EBOF ]] && "$EBOF" discover --help 2>/dev/null | grep -qE -- '(^|[ ,])(-t|--transport)\b'
}

# ebof_serve_rdma_check CONFIG: 0 when `ebof serve` accepts the RDMA listener of CONFIG (its
# --print-config dry run succeeds and echoes the transport), 77 when it rejects it because of the
# transport (the version before RDMA: "unknown field `transport`"), 1 for any other failure
ebof_serve_rdma_check() {
	local out rc=0
	[[ -x $EBOF ]] || { echo "no ebof binary at '$EBOF'"; return 77; }
	out=$("$EBOF" serve --config "$1" --print-config 2>&1) || rc=$?
	if ((rc == 0)) && grep -qi 'rdma' <<<"$out"; then
		return 0
	fi
	echo "$out" | tail -n 5
	if grep -qi 'transport' <<<"$out"; then
		return 77
	fi
	((rc != 0)) || echo "--print-config succeeded but does not show the rdma transport"
	return 1
}

# ebof_missing MESSAGE: the current step cannot run with this ebof yet: SKIP; under
# EBOF_INTEROP_STRICT the step reports MISSING and strict_verdict fails the run at its end (so the
# other half, host tools or serve, still runs when only one of them has landed)
# shellcheck disable=SC2034 # STEP_RESULT is read by guest-lib.sh's step
ebof_missing() {
	if [[ -n ${EBOF_INTEROP_STRICT:-} && ${EBOF_INTEROP_STRICT} != 0 ]]; then
		echo "!!!! $* (EBOF_INTEROP_STRICT: a failure, reported at the end)"
		STEP_RESULT=MISSING
		echo "[$STEP_NO] $STEP_TITLE: $*" >>"$X/missing.txt"
	else
		step_skip "$*"
	fi
}

# strict_verdict: fail when an ebof step was MISSING under EBOF_INTEROP_STRICT
strict_verdict() {
	if [[ -s $X/missing.txt ]]; then
		cat "$X/missing.txt"
		fail "EBOF_INTEROP_STRICT: $(wc -l <"$X/missing.txt") ebof step(s) could not run"
	fi
	echo "every ebof step ran"
}

# discovery_check OUTPUT NQN: the discovery log (nvme-cli's text) has an RDMA entry for NQN with the
# NVMe/RDMA transport-specific fields (RDMA_QPTYPE reliable connected, RDMA_CMS RDMA-CM)
discovery_check() {
	local out=$1 nqn=$2
	grep -qE '^trtype: +rdma' <<<"$out" || fail "no entry with trtype rdma"
	grep -qE "^subnqn: +$nqn\$" <<<"$out" || fail "no entry for $nqn"
	grep -qE '^rdma_qptype: +connected' <<<"$out" || fail "rdma_qptype is not 'connected'"
	grep -qE '^rdma_cms: +rdma-cm' <<<"$out" || fail "rdma_cms is not 'rdma-cm'"
}

rdma_discover() {
	local out
	out=$(run -t 60 nvme discover -t rdma -a "$TARGET_IP" -s "$TARGET_PORT")
	echo "$out"
	discovery_check "$out" "$1"
}

rdma_connect() {
	nvme_connect "$1"
	run nvme list
	rdma_ctrl_facts
	echo "queues: $(cat "/sys/class/nvme/$CTRL/queue_count") (with admin)," \
		"sqsize $(cat "/sys/class/nvme/$CTRL/sqsize"), address $(cat "/sys/class/nvme/$CTRL/address")"
}

serve_rdma_conf() {
	local conf=$1 ip=$2 port=$3 nqn=$4 size=$5
	cat >"$conf" <<-EOF
		[[listeners]]
		address = "$ip"
		port = $port
		transport = "rdma"

		[[subsystems]]
		nqn = "$nqn"
		allow_any_host = true

		[[subsystems.namespaces]]
		nsid = 1
		backend = "ram"
		size = "$size"
	EOF
	cat "$conf"
}

serve_rdma_check() {
	local rc=0
	serve_rdma_conf "$@"
	ebof_serve_rdma_check "$1" || rc=$?
	# shellcheck disable=SC2034 # SERVE is read by the guest scripts
	case $rc in
	0) SERVE=1 && echo "ebof serve accepts transport = \"rdma\"" ;;
	77) ebof_missing "ebof serve rejects transport = \"rdma\" (not implemented yet): no ebof serve steps" ;;
	*) fail "ebof serve --print-config failed on the RDMA configuration" ;;
	esac
}

_serve_alive() { [[ -n $SERVE_PID ]] && kill -0 "$SERVE_PID" 2>/dev/null; }
_serve_up() {
	_serve_alive || fail "ebof serve exited: $(tail -n 20 "$1")"
	rdma_listening "$2" "$3"
}

serve_rdma_start() {
	local conf=$1 log=$2 ip=$3 port=$4
	# The RDMA target registers (pins) its RAM namespace. The guest's default RLIMIT_MEMLOCK is
	# 8 MiB; root has CAP_IPC_LOCK, which ib_umem_get accepts instead, but lift the limit anyway.
	ulimit -l unlimited
	echo "+ $EBOF serve --config $conf (RLIMIT_MEMLOCK $(ulimit -l), RUST_LOG=${RUST_LOG:-info})"
	RUST_LOG=${RUST_LOG:-info} "$EBOF" serve --config "$conf" >"$log" 2>&1 &
	SERVE_PID=$!
	wait_for 60 _serve_up "$log" "$ip" "$port" ||
		fail "ebof serve (pid $SERVE_PID) does not listen on rdma $ip:$port: $(tail -n 20 "$log")"
	run rdma resource show cm_id
	echo "ebof serve pid $SERVE_PID listens on rdma $ip:$port"
}

serve_rdma_stop() {
	local log=$1
	_serve_alive || fail "ebof serve died before the stop: $(tail -n 20 "$log")"
	kill -TERM "$SERVE_PID"
	# shellcheck disable=SC2016 # expanded by eval
	wait_for 20 eval '! _serve_alive' || { kill -KILL "$SERVE_PID"; fail "ebof serve ignored SIGTERM for 20 s"; }
	wait "$SERVE_PID" || echo "ebof serve exited with status $? after SIGTERM"
	SERVE_PID=''
	tail -n 15 "$log"
	! grep -qiE 'panic' "$log" || fail "ebof serve's log has a panic"
}

# rxe_stats: the soft-RoCE port's packet counters (sent_pkts, rcvd_pkts, ...)
rxe_stats() { rdma statistic show link "$RXE_DEV/1" 2>/dev/null || echo "(no rdma statistic for $RXE_DEV)"; }

# rdma_ctrl_facts: the fields of $CTRL's Identify Controller that matter over RDMA, and its queues
rdma_ctrl_facts() {
	nvme id-ctrl "/dev/$CTRL" -o json | tr -d ' \n' | grep -oE '"(mdts|maxcmd|ioccsz|iorcsz|icdoff|sgls|msdbd|fcatt|kas)":[0-9]+' |
		tr '\n' ' '
	echo
}
