#!/bin/bash
# Scenario: in-band authentication (DH-HMAC-CHAP) and NVMe/TCP TLS (issue 12) against the Linux 6.12
# stack. Needs the trixie guest (VM_FLAVOUR=trixie: Debian trixie's kernel, nvme-cli 2.13, tlshd,
# keyutils, fio; built and cached by vm_setup). Guest side: linux-security.guest.sh.
#
# (i)   kernel <-> kernel in the guest (no ebof needed): the kernel's own target on 10.77.0.2, port
#       4420 plain and 4421 TLS-required; the kernel host with DH-HMAC-CHAP one-way and two-way,
#       wrong/missing keys refused, TLS with the PSK from the keyring and from the command line,
#       plaintext to the TLS port refused, TLS + DH-HMAC-CHAP, fio verify over TLS.
# (i')  guest_request host-tools: ebof's host tools (discover/identify/perf --verify) run here, in
#       the netns, against that kernel target with --dhchap-secret / --dhchap-ctrl-secret / --tls
#       --tls-key; each step is SKIPPED while `ebof SUB --help` does not list the flags it needs.
# (ii)  guest_request ebof-start: `ebof serve` here on 10.77.0.1 (4420 tls off, 4421 tls required)
#       with the hosts' DH-HMAC-CHAP keys and TLS PSKs the guest generated; the guest connects with
#       each. If `ebof serve` rejects the configuration (an unknown field: no DH-HMAC-CHAP/TLS yet),
#       the answer is 77 and the guest SKIPS every ebof step. Once ebof serve ran, its log must not
#       contain any of the secrets. ebof serves with `[target] tls_rekey_records = 16` (16
#       full-size-record equivalents per key: every 256 KiB) and the default `tls_key_update =
#       "peer"`; the guest runs fio --verify for $SEC_REKEY_SECS s over TLS and asks
#       (guest_request ebof-tls-stats) that ebof kept its key past the threshold many times
#       (KeyUpdates deferred) and sent the kernel host no KeyUpdate.
#       Last, the re-add step (issue 34, the shape of blktests nvme/061): the subsystem
#       `…:sec-readd` (file namespace) is removed with `ebof ctl` while the host is connected
#       (guest_request readd remove); the 6.12 host must keep retrying (no "Removing
#       controller": ebof refuses the reconnect's Connect with DNR clear) and, after `readd
#       add`, come back live by itself within SEC_READD_SECS s with its data intact.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-security.sh
# Environment:
#   EBOF_BIN               ebof binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 900)
#   EBOF_INTEROP_STRICT=1  skipped ebof steps (missing flags, rejected config) fail the scenario
#   HOST_CMD_TIMEOUT       bound on each host command in seconds (default 120)
#   RUST_LOG               passed to `ebof serve` (default info)
#   EBOF_INTEROP_TARGET=kernel  reference run: part (ii) goes to the guest kernel's own target,
#                          configured like the ebof one (checks the steps; the wrong-PSK step skips)
#   SEC_REKEY_SECS         fio time of the KeyUpdate-threshold step (default 60)
#   SEC_READD_SECS         bound on the re-add step's reconnect once the subsystem is back
#                          (default 20)
#   EBOF_INTEROP_MIRROR    the replicated-volume steps (linux-mirror.sh) run in this boot
#                          (default 1; 0 leaves them out)
#   SEC_TLS_KEY_UPDATE     ebof's [target] tls_key_update (default "peer"; "always" is the
#                          experiment of ADR 0024: the rekey step then shows what the host does)
# Exit status: 0 passed, else failed.
# shellcheck disable=SC2317 # host_on_* are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

VM_FLAVOUR=trixie
EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
export RUST_LOG=${RUST_LOG:-info}
: "${HOST_CMD_TIMEOUT:=120}"
EBOF_STARTED=''

# read_env FILE: the KEY=value lines the guest wrote into /xchg/FILE, into the array K
declare -A K=()
read_env() {
	local k v
	K=()
	[[ -s $X/$1 ]] || { warn "the guest wrote no $1"; return 1; }
	while IFS='=' read -r k v; do
		[[ $k =~ ^[A-Z_][A-Z0-9_]*$ ]] && K[$k]=$v
	done <"$X/$1"
}

# sec_step [--refused] TITLE "FLAG..." SUB ARGS...: host_step TITLE $EBOF_BIN SUB ARGS (with
# --refused: it must fail), SKIPPED while `ebof SUB --help` does not list every FLAG
# (EBOF_INTEROP_STRICT=1: counted as a failure)
sec_step() {
	local refused='' title flags sub f missing=()
	[[ $1 == --refused ]] && { refused=1; shift; }
	title=$1 flags=$2 sub=$3
	shift 2
	for f in $flags; do
		"$EBOF_BIN" "$sub" --help 2>/dev/null | grep -q -- "$f" || missing+=("$f")
	done
	if ((${#missing[@]})); then
		echo
		echo "==== host: $title: SKIPPED ('ebof $sub' has no ${missing[*]} yet)"
		if [[ -n ${EBOF_INTEROP_STRICT:-} ]]; then
			_host_result "$title" 127 0
		else
			HOST_SKIPPED=$((HOST_SKIPPED + 1))
			HOST_RESULTS+=("$(printf '%-60s %5ss  %s' "$title" 0 SKIP)")
		fi
		return 0
	fi
	if [[ -n $refused ]]; then
		host_step "$title" must_fail "$EBOF_BIN" "$@"
	else
		host_step "$title" "$EBOF_BIN" "$@"
	fi
}
# must_fail CMD...: inside the netns, CMD must fail
must_fail() {
	local rc=0
	timeout -k 5 "$HOST_CMD_TIMEOUT" ip netns exec "$NS" "$@" || rc=$?
	echo "(status $rc: must be non-zero)"
	((rc != 0))
}

# guest_request host-tools: ebof's host tools against the guest kernel's own target
host_on_host_tools() {
	read_env kernel-keys.env || return 1
	local ip=${K[IP]} nqn=${K[KNQN]} p=${K[PLAIN_PORT]} t=${K[TLS_PORT]}
	local auth=(--hostnqn "${K[H_AUTH]}" --dhchap-secret "${K[KEY_AUTH]}")
	local ctrl=(--dhchap-ctrl-secret "${K[KEY_CTRL]}")
	local tls=(--hostnqn "${K[H_TLS]}" --tls --tls-key "${K[TLS_KEY_TLS]}")
	local perf=(--rw randrw --bs 4k --qd 8 --runtime 3s --range 0-32M --verify)
	host_step "raw ICReq/ICResp to the kernel target's plain port" raw_icreq_check "$ip" "$p"
	sec_step "ebof discover (kernel target)" "--hostnqn" discover -a "$ip" -s "$p" --hostnqn "${K[H_TLS]}"
	sec_step "ebof identify, DH-HMAC-CHAP one-way" "--dhchap-secret" \
		identify -a "$ip" -s "$p" -n "$nqn" "${auth[@]}" --json
	sec_step "ebof perf --verify, DH-HMAC-CHAP two-way" "--dhchap-secret --dhchap-ctrl-secret" \
		perf -a "$ip" -s "$p" -n "$nqn" "${auth[@]}" "${ctrl[@]}" "${perf[@]}"
	sec_step --refused "ebof identify, wrong host key refused" "--dhchap-secret" \
		identify -a "$ip" -s "$p" -n "$nqn" --hostnqn "${K[H_AUTH]}" --dhchap-secret "${K[KEY_WRONG]}"
	sec_step "ebof identify, TLS (configured PSK)" "--tls --tls-key" \
		identify -a "$ip" -s "$t" -n "$nqn" "${tls[@]}" --json
	sec_step "ebof perf --verify, TLS" "--tls --tls-key" \
		perf -a "$ip" -s "$t" -n "$nqn" "${tls[@]}" "${perf[@]}"
	sec_step "ebof perf --verify, TLS + DH-HMAC-CHAP two-way" "--tls --tls-key --dhchap-secret --dhchap-ctrl-secret" \
		perf -a "$ip" -s "$t" -n "$nqn" "${auth[@]}" "${ctrl[@]}" --tls --tls-key "${K[TLS_KEY_AUTH]}" "${perf[@]}"
	((HOST_FAILED == 0))
}

write_config() {
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-security.sh from the keys the guest generated
[[listeners]]
address = "$HOST_IP"
port = ${K[PLAIN_PORT]}
tls = "off"

[[listeners]]
address = "$HOST_IP"
port = ${K[TLS_PORT]}
tls = "required"

[[hosts]]
nqn = "${K[H_AUTH]}"
dhchap_key = "${K[E_KEY_AUTH]}"
dhchap_ctrl_key = "${K[E_KEY_CTRL]}"
tls_key = "${K[E_TLS_AUTH]}"

[[hosts]]
nqn = "${K[H_TLS]}"
tls_key = "${K[E_TLS_TLS]}"

[[hosts]]
nqn = "${K[H_BAD]}"
tls_key = "${K[E_TLS_BAD]}"

[[subsystems]]
nqn = "${K[SNQN]}"
hosts = ["${K[H_AUTH]}", "${K[H_TLS]}", "${K[H_BAD]}"]

[[subsystems.namespaces]]
nsid = 1
backend = "ram"
size = "64M"

# the re-add step (issue 34): removed and added back with ebof ctl while a host is connected
[[subsystems]]
nqn = "${K[RNQN]}"
allow_any_host = true

[[subsystems.namespaces]]
nsid = 1
backend = "file"
path = "$RUN_DIR/readd.img"
size = "16M"

[management]
socket = "$RUN_DIR/mgmt.sock"
data_dirs = ["$RUN_DIR"]

[target]
tls_rekey_records = 16
tls_key_update = "${SEC_TLS_KEY_UPDATE:-peer}"
EOF
	echo "---- $RUN_DIR/ebof.toml (keys elided) ----"
	sed -E 's/(DHHC-1|NVMeTLSkey-1):[0-9]+:[^"]*/\1:…/' "$RUN_DIR/ebof.toml"
}

# guest_request ebof-start: 0 = serving on both ports; 77 = `ebof serve` (or its configuration)
# has no DH-HMAC-CHAP/TLS yet; else failed
host_on_ebof_start() {
	local i p
	if [[ ! -x $EBOF_BIN ]] || ! "$EBOF_BIN" serve --help >/dev/null 2>&1; then
		log "SKIP the ebof steps: '$EBOF_BIN serve' is not available"
		[[ -n ${EBOF_INTEROP_STRICT:-} ]] && return 1
		return 77
	fi
	read_env ebof-keys.env || return 1
	write_config
	bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --config "$RUN_DIR/ebof.toml"
	EBOF_STARTED=1
	for ((i = 0; i < 150; i++)); do
		if ! bg_alive target; then
			bg_log_tail target 20
			if grep -qiE 'unknown field|unknown-field|unknown variant' "$RUN_DIR/target.log"; then
				log "SKIP the ebof steps: ebof serve rejected the DH-HMAC-CHAP/TLS configuration (above)"
				EBOF_STARTED=''
				[[ -n ${EBOF_INTEROP_STRICT:-} ]] && return 1
				return 77
			fi
			warn "ebof serve exited"
			return 1
		fi
		p=0
		[[ -n $(ns_exec ss -Hltn "sport = :${K[PLAIN_PORT]}") ]] && p=$((p + 1))
		[[ -n $(ns_exec ss -Hltn "sport = :${K[TLS_PORT]}") ]] && p=$((p + 1))
		((p == 2)) && { log "ebof serve listening on ${K[PLAIN_PORT]} and ${K[TLS_PORT]} (pid $(bg_pid target))"; return 0; }
		sleep 0.2
	done
	warn "ebof serve does not listen on ${K[PLAIN_PORT]} and ${K[TLS_PORT]} after 30 s"
	bg_log_tail target 20
	return 1
}

# guest_request ebof-tls-stats mark|check: "mark" before the rekey step's connect; "check" after
# its disconnect: since the mark, ebof kept its key past the threshold (deferrals in the
# per-connection stats it logs at close) and sent no KeyUpdate to the kernel host. With
# SEC_TLS_KEY_UPDATE=always: only reported.
host_on_ebof_tls_stats() {
	local log=$RUN_DIR/target.log mark=$RUN_DIR/tls-stats.mark deferred sent new
	if [[ $1 == mark ]]; then
		wc -l <"$log" >"$mark"
		return 0
	fi
	new=$(tail -n +$(($(cat "$mark" 2>/dev/null || echo 0) + 1)) "$log")
	grep -E 'KeyUpdate threshold reached|TLS record stats at close' <<<"$new" | tail -n 5
	deferred=$(grep -oE 'key_updates_deferred=[0-9]+' <<<"$new" | awk -F= '{ s += $2 } END { print s + 0 }')
	sent=$(grep -oE 'key_updates_sent=[0-9]+' <<<"$new" | awk -F= '{ s += $2 } END { print s + 0 }')
	log "ebof TLS record stats: KeyUpdates deferred $deferred, sent $sent (tls_key_update = ${SEC_TLS_KEY_UPDATE:-peer})"
	[[ ${SEC_TLS_KEY_UPDATE:-peer} == always ]] && return 0
	((sent == 0)) || { warn "ebof sent $sent KeyUpdates to a peer that never sent one"; return 1; }
	((deferred >= 10)) || { warn "the rekey step crossed the threshold only $deferred times (want >= 10)"; return 1; }
	return 0
}

# guest_request readd remove|add: the re-add step's subsystem removed with `ebof ctl` on the
# running box, or added back as the configuration has it (same NQN, NSID, file; UUID and serial
# are derived from the NQN, so the host sees the same namespace)
host_on_readd() {
	local nqn=${K[RNQN]:-} rc=0
	[[ -n $nqn ]] || { warn "readd: no RNQN in ebof-keys.env"; return 1; }
	MGMT_SOCK=$RUN_DIR/mgmt.sock
	case $1 in
	remove) host_on_ctl "subsystem remove $nqn" || rc=$? ;;
	add) { host_on_ctl "subsystem add $nqn" && host_on_ctl "ns add $nqn --file $RUN_DIR/readd.img --nsid 1"; } || rc=$? ;;
	*) warn "readd: unknown action '$1'"; return 1 ;;
	esac
	cat "$X/ctl.out" "$X/ctl.err" 2>/dev/null
	log "readd $1: ebof ctl status $rc"
	return "$rc"
}

# after the run: ebof serve still alive, and none of the guest's secrets in its log
check_ebof_after() {
	local rc=0 v
	if ! bg_alive target; then
		warn "ebof serve is not running any more"
		rc=1
	fi
	for v in E_KEY_AUTH E_KEY_CTRL E_TLS_AUTH E_TLS_TLS E_TLS_BAD; do
		[[ -n ${K[$v]:-} ]] || continue
		# the base64 body of the key, without the DHHC-1:0N: / NVMeTLSkey-1:0N: prefix
		local body=${K[$v]#*:*:}
		body=${body%:}
		if grep -qF -- "$body" "$RUN_DIR/target.log"; then
			warn "ebof serve's log contains the secret $v"
			rc=1
		fi
	done
	((rc == 0)) && log "ebof serve alive; its log holds none of the secrets"
	return "$rc"
}

# ---------------------------------------------------------------------------------------------

interop_init linux-security
vm_setup
vm_env "KERNEL_NQN=nqn.2026-11.io.ebof:ksec" "EBOF_NQN=nqn.2026-11.io.ebof:sec" \
	"SEC_TARGET=${EBOF_INTEROP_TARGET:-ebof}" "SEC_REKEY_SECS=${SEC_REKEY_SECS:-60}" \
	"SEC_READD_SECS=${SEC_READD_SECS:-20}" \
	"SEC_TLS_KEY_UPDATE=${SEC_TLS_KEY_UPDATE:-peer}"
# the replicated-volume steps (linux-mirror.sh) share this boot unless EBOF_INTEROP_MIRROR=0
if [[ ${EBOF_INTEROP_MIRROR:-1} == 1 ]]; then
	# shellcheck source=linux-mirror.sh
	source "$INTEROP_DIR/linux-mirror.sh"
	mirror_attach
fi
vm_run "$INTEROP_DIR/linux-security.guest.sh" "${EBOF_INTEROP_TIMEOUT:-900}"
rc=$?
if [[ ${EBOF_INTEROP_MIRROR:-1} == 1 ]]; then
	mirror_detach "$rc" || rc=$?
fi
if [[ -n $EBOF_STARTED ]]; then
	check_ebof_after || { ((rc == 0)) && rc=1; }
	((rc != 0)) && bg_log_tail target 60
fi
((rc == 0 && HOST_FAILED > 0)) && rc=1
if [[ -s $X/skipped.txt ]]; then
	echo "---- guest steps SKIPPED ----"
	cat "$X/skipped.txt"
	[[ -n ${EBOF_INTEROP_STRICT:-} ]] && ((rc == 0)) && rc=1
fi
echo
timing_summary
host_summary
log "linux-security: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
