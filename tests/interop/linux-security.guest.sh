#!/bin/bash
# Guest half of linux-security.sh (trixie guest: Linux 6.12, nvme-cli 2.13, tlshd). Two parts:
#
# (i)  kernel <-> kernel inside the guest: the kernel's own target (nvmet-tcp) on $GUEST_IP, port
#      4420 plain and 4421 TLS-required, subsystem $KNQN on a brd RAM disk; the kernel host connects
#      with DH-HMAC-CHAP one-way and two-way, wrong keys refused, TLS (PSK from the keyring and
#      given on the command line), plaintext to the TLS port refused, TLS + DH-HMAC-CHAP, fio
#      verify over TLS. Then the host side runs ebof's host tools against that target
#      (guest_request host-tools; skipped there until they take --dhchap-secret / --tls).
# (ii) the kernel host against `ebof serve` on $HOST_IP (guest_request ebof-start: the host side
#      writes the configuration from /xchg/ebof-keys.env and starts it; status 77 = `ebof serve`
#      rejected the configuration, i.e. no DH-HMAC-CHAP/TLS yet, and every ebof step is SKIPPED).
#
# Keys are generated here with nvme-cli and handed over in /xchg/*.env (KEY=value lines).
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"
# shellcheck source=guest-security.sh
source "$X/guest-security.sh"

KNQN=${KERNEL_NQN:-nqn.2026-11.io.ebof:ksec}
SNQN=${EBOF_NQN:-nqn.2026-11.io.ebof:sec}
PLAIN_PORT=4420 TLS_PORT=4421
U=nqn.2014-08.org.nvmexpress:uuid
# three hosts, each with its own host NQN and host ID (the 6.12 host refuses one host ID under two NQNs)
H_AUTH=$U:5ec00001-0000-4000-8000-000000000001 ID_AUTH=5ec00001-0000-4000-8000-000000000001
H_TLS=$U:5ec00002-0000-4000-8000-000000000002 ID_TLS=5ec00002-0000-4000-8000-000000000002
H_BAD=$U:5ec00003-0000-4000-8000-000000000003 ID_BAD=5ec00003-0000-4000-8000-000000000003
# the re-add step's subsystem (allow_any_host, a file namespace) and its host (no keys)
RNQN=$SNQN-readd
H_READD=$U:5ec00004-0000-4000-8000-000000000004 ID_READD=5ec00004-0000-4000-8000-000000000004
FIO_MB=${SEC_FIO_MB:-8}
EBOF_UP=''

# sec_connect EXPECT NQN IP PORT HOST HOSTID [NVME CONNECT ARGS]: connect, wait for namespace 1,
# print what the kernel logged, and check that what EXPECT lists (comma-separated) happened:
#   auth  the kernel host logged "qid 0: authenticated with hash ... dhgroup ..."
#   ctrl  ... and "qid 0: controller authenticated" (bidirectional)
#   tls   the controller has a TLS PSK (/sys/class/nvme/nvmeX/tls_key); "plain": it has none
sec_connect() {
	local expect=$1 nqn=$2 ip=$3 port=$4 h=$5 id=$6 tk
	shift 6
	kmsg_mark
	TARGET_IP=$ip TARGET_PORT=$port nvme_connect "$nqn" --hostnqn="$h" --hostid="$id" "$@"
	tk=$(ctrl_tls_key "$CTRL")
	echo "tls_key: ${tk:-none}; kernel:"
	kmsg_since | sed 's/^/    k /'
	[[ ,$expect, == *,auth,* ]] && want_kmsg "DH-HMAC-CHAP" "nvme[0-9]+: qid 0: authenticated with hash"
	[[ ,$expect, == *,ctrl,* ]] && want_kmsg "bidirectional DH-HMAC-CHAP" "nvme[0-9]+: qid 0: controller authenticated"
	[[ ,$expect, == *,tls,* && -z $tk ]] && fail "TLS expected, but $CTRL has no tls_key"
	[[ ,$expect, == *,plain,* && -n $tk ]] && fail "no TLS expected, but $CTRL has tls_key $tk"
	[[ ,$expect, != *,auth,* ]] && kmsg_since | grep -qE "qid 0: authenticated" && fail "unexpected DH-HMAC-CHAP"
	return 0
}
# sec_io NAME [SIZE [FIO ARGS]]: fio write + crc32c verify on the connected namespace
sec_io() {
	local name=$1 size=${2:-${FIO_MB}M}
	shift $(($# < 2 ? $# : 2))
	fio_verify "sec-$name" "$NSDEV" "$size" randwrite 16k 8 "$@"
}
sec_disconnect() { nvme_disconnect "$1"; }

# cid EXPECT NQN IP PORT HOST HOSTID [ARGS]: connect (checked as sec_connect), fio 2 MiB, disconnect
cid() {
	local nqn=$2
	sec_connect "$@"
	sec_io cid 2M
	sec_disconnect "$nqn"
}

# shellcheck disable=SC2034 # variables reach save_env by name
save_env() { # save_env FILE VAR...: KEY=value lines for the host side
	local f=$1 v
	shift
	: >"$X/.$f"
	for v in "$@"; do printf '%s=%s\n' "$v" "${!v}" >>"$X/.$f"; done
	mv "$X/.$f" "$X/$f"
}

# ---------------------------------------------------------------------------------------------
# (i) kernel <-> kernel

setup() {
	sec_modules
	tlshd_start
	nvme version
	echo "keyring .nvme: $(nvme_keyring)"
	echo "options the kernel's /dev/nvme-fabrics takes: $(cat /dev/nvme-fabrics)"
	# the guest can run the binary under test (/ebof/ebof, lib.sh's copy; trixie's libssl3t64 present)
	if [[ -x ${EBOF_BIN:-} ]]; then
		run "$EBOF_BIN" --version || echo "NOTE: $EBOF_BIN does not run in the guest"
	fi
}

KEY_AUTH='' KEY_CTRL='' KEY_WRONG='' KEY_CTRL_WRONG='' TLS_KEY_TLS='' TLS_KEY_AUTH=''
# shellcheck disable=SC2034 # IP: handed over by name (save_env)
gen_keys() {
	KEY_AUTH=$(gen_dhchap_key "$H_AUTH" 1)
	KEY_CTRL=$(gen_dhchap_key "$KNQN" 2 48)
	KEY_WRONG=$(gen_dhchap_key "$H_AUTH" 1)
	KEY_CTRL_WRONG=$(gen_dhchap_key "$KNQN" 2 48)
	TLS_KEY_TLS=$(gen_tls_key "$H_TLS" "$KNQN" 1 0 --insert)
	TLS_KEY_AUTH=$(gen_tls_key "$H_AUTH" "$KNQN" 1 0 --insert)
	echo "host key  $KEY_AUTH"
	echo "ctrl key  $KEY_CTRL"
	echo "TLS keys  $TLS_KEY_TLS (hostnqn ...02), $TLS_KEY_AUTH (hostnqn ...01)"
	run nvme check-tls-key --keydata="$TLS_KEY_TLS" --hostnqn="$H_TLS" --subsysnqn="$KNQN" -v
	echo
	tls_keys
	local IP=$GUEST_IP
	save_env kernel-keys.env KNQN IP PLAIN_PORT TLS_PORT H_AUTH H_TLS KEY_AUTH KEY_CTRL KEY_WRONG TLS_KEY_TLS \
		TLS_KEY_AUTH
}

kernel_target() {
	kt_subsys "$KNQN" /dev/ram0
	kt_host "$H_AUTH" "$KEY_AUTH" "$KEY_CTRL" "hmac(sha384)" ffdhe3072
	kt_host "$H_TLS"
	kt_allow "$KNQN" "$H_AUTH"
	kt_allow "$KNQN" "$H_TLS"
	kt_port 1 "$GUEST_IP" "$PLAIN_PORT"
	kt_port 2 "$GUEST_IP" "$TLS_PORT" tls
	kt_link 1 "$KNQN"
	kt_link 2 "$KNQN"
	wait_for 10 _listens "$PLAIN_PORT" || fail "nvmet does not listen on $PLAIN_PORT"
	wait_for 10 _listens "$TLS_PORT" || fail "nvmet does not listen on $TLS_PORT"
	run nvme discover -t tcp -a "$GUEST_IP" -s "$PLAIN_PORT" --hostnqn="$H_TLS" --hostid="$ID_TLS"
	# the TLS port's own discovery log (how nvmet advertises TREQ/TSAS): discovery over TLS needs a
	# PSK for the well-known discovery NQN; informative only
	gen_tls_key "$H_TLS" nqn.2014-08.org.nvmexpress.discovery 1 0 --insert >/dev/null
	run nvme discover -t tcp -a "$GUEST_IP" -s "$TLS_PORT" --hostnqn="$H_TLS" --hostid="$ID_TLS" --tls ||
		echo "NOTE: discovery over TLS on port $TLS_PORT failed (status $?)"
}
_listens() { [[ -n $(ss -Hltn "sport = :$1") ]]; }

k_oneway() { cid auth,plain "$KNQN" "$GUEST_IP" "$PLAIN_PORT" "$H_AUTH" "$ID_AUTH" --dhchap-secret="$KEY_AUTH"; }
k_twoway() {
	cid auth,ctrl,plain "$KNQN" "$GUEST_IP" "$PLAIN_PORT" "$H_AUTH" "$ID_AUTH" --dhchap-secret="$KEY_AUTH" \
		--dhchap-ctrl-secret="$KEY_CTRL"
}
k_wrong_host_key() {
	expect_fail "wrong host key" nvme connect -t tcp -a "$GUEST_IP" -s "$PLAIN_PORT" -n "$KNQN" \
		--hostnqn="$H_AUTH" --hostid="$ID_AUTH" --dhchap-secret="$KEY_WRONG"
}
k_wrong_ctrl_key() {
	expect_fail "wrong controller key" nvme connect -t tcp -a "$GUEST_IP" -s "$PLAIN_PORT" -n "$KNQN" \
		--hostnqn="$H_AUTH" --hostid="$ID_AUTH" --dhchap-secret="$KEY_AUTH" --dhchap-ctrl-secret="$KEY_CTRL_WRONG"
}
k_no_key() {
	expect_fail "no key for a host that must authenticate" nvme connect -t tcp -a "$GUEST_IP" \
		-s "$PLAIN_PORT" -n "$KNQN" --hostnqn="$H_AUTH" --hostid="$ID_AUTH"
}
k_tls_keyring() {
	sec_connect tls "$KNQN" "$GUEST_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls
	sec_io tls-keyring
	sec_disconnect "$KNQN"
}
k_tls_cmdline() { cid tls "$KNQN" "$GUEST_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls --tls-key="$TLS_KEY_TLS"; }
k_tls_plaintext() {
	expect_fail "plaintext connect to the TLS-required port" nvme connect -t tcp -a "$GUEST_IP" \
		-s "$TLS_PORT" -n "$KNQN" --hostnqn="$H_TLS" --hostid="$ID_TLS"
}
k_tls_auth() {
	cid tls,auth,ctrl "$KNQN" "$GUEST_IP" "$TLS_PORT" "$H_AUTH" "$ID_AUTH" --tls --dhchap-secret="$KEY_AUTH" \
		--dhchap-ctrl-secret="$KEY_CTRL"
}

# informative (never fails): does the 6.12 host do secure channel concatenation (nvme-cli --concat:
# DH-HMAC-CHAP on a plain port, then TLS with the generated PSK)?
k_concat() {
	local rc=0 out
	kmsg_mark
	out=$(timeout -k 5 60 nvme connect -t tcp -a "$GUEST_IP" -s "$PLAIN_PORT" -n "$KNQN" --hostnqn="$H_AUTH" \
		--hostid="$ID_AUTH" --dhchap-secret="$KEY_AUTH" --concat 2>&1) || rc=$?
	echo "nvme connect --concat: status $rc: $out"
	kmsg_since | sed 's/^/    k /'
	if nvme_ctrl_for "$KNQN" >/dev/null; then
		echo "connected: tls_key=$(ctrl_tls_key "$(nvme_ctrl_for "$KNQN")")"
		sec_disconnect "$KNQN"
	fi
	return 0
}

# ---------------------------------------------------------------------------------------------
# (ii) the kernel host against ebof serve (on the host side, $HOST_IP)

# SEC_TARGET=kernel (EBOF_INTEROP_TARGET=kernel on the host side): a reference run of these steps
# against the guest kernel's own target, configured like the ebof one (same keys, a second
# subsystem $SNQN on the kernel target's ports): checks the steps themselves, no ebof needed.
SEC_TARGET=${SEC_TARGET:-ebof}
E_IP=$HOST_IP
E_KEY_AUTH='' E_KEY_CTRL='' E_KEY_WRONG='' E_KEY_CTRL_WRONG='' E_TLS_AUTH='' E_TLS_TLS='' E_TLS_BAD=''
# shellcheck disable=SC2034 # E_TLS_AUTH, E_TLS_BAD, IP: handed over by name (save_env)
ebof_start() {
	E_KEY_AUTH=$(gen_dhchap_key "$H_AUTH" 1)
	E_KEY_CTRL=$(gen_dhchap_key "$SNQN" 1)
	E_KEY_WRONG=$(gen_dhchap_key "$H_AUTH" 1)
	E_KEY_CTRL_WRONG=$(gen_dhchap_key "$SNQN" 1)
	E_TLS_AUTH=$(gen_tls_key "$H_AUTH" "$SNQN" 1 0 --insert)
	E_TLS_TLS=$(gen_tls_key "$H_TLS" "$SNQN" 1 0 --insert)
	# H_BAD: ebof is given E_TLS_BAD, the keyring another key for the same identity
	E_TLS_BAD=$(gen_tls_key "$H_BAD" "$SNQN" 1 0)
	gen_tls_key "$H_BAD" "$SNQN" 1 0 --insert >/dev/null
	tls_keys
	local IP=$E_IP
	save_env ebof-keys.env SNQN RNQN IP PLAIN_PORT TLS_PORT H_AUTH H_TLS H_BAD E_KEY_AUTH E_KEY_CTRL E_TLS_AUTH \
		E_TLS_TLS E_TLS_BAD
	local rc=0
	if [[ $SEC_TARGET == kernel ]]; then
		kernel_as_ebof
		return 0
	fi
	guest_request ebof-start "" 120 || rc=$?
	case $rc in
	0) EBOF_UP=1 ;;
	77) step_skip "ebof serve rejected the DH-HMAC-CHAP/TLS configuration (see the host's log):" \
		"every ebof step below is skipped" ;;
	*) fail "the host could not start ebof serve (status $rc)" ;;
	esac
}
kernel_as_ebof() {
	E_IP=$GUEST_IP
	kt_subsys "$SNQN" /dev/ram1
	kt_host "$H_AUTH" "$E_KEY_AUTH" "$E_KEY_CTRL" # host entries are global: H_AUTH gets the new keys
	kt_host "$H_TLS"
	kt_host "$H_BAD"
	kt_allow "$SNQN" "$H_AUTH"
	kt_allow "$SNQN" "$H_TLS"
	kt_allow "$SNQN" "$H_BAD"
	kt_link 1 "$SNQN"
	kt_link 2 "$SNQN"
	EBOF_UP=1
	echo "reference run: the ebof steps go to the kernel target ($SNQN on $E_IP)"
}
_need_ebof() { [[ -n $EBOF_UP ]] || { step_skip "ebof serve has no DH-HMAC-CHAP/TLS yet"; return 1; }; }

e_oneway() { _need_ebof || return 0; cid auth,plain "$SNQN" "$E_IP" "$PLAIN_PORT" "$H_AUTH" "$ID_AUTH" --dhchap-secret="$E_KEY_AUTH"; }
e_twoway() {
	_need_ebof || return 0
	cid auth,ctrl,plain "$SNQN" "$E_IP" "$PLAIN_PORT" "$H_AUTH" "$ID_AUTH" --dhchap-secret="$E_KEY_AUTH" \
		--dhchap-ctrl-secret="$E_KEY_CTRL"
}
e_wrong_host_key() {
	_need_ebof || return 0
	expect_fail "wrong host key" nvme connect -t tcp -a "$E_IP" -s "$PLAIN_PORT" -n "$SNQN" \
		--hostnqn="$H_AUTH" --hostid="$ID_AUTH" --dhchap-secret="$E_KEY_WRONG"
}
e_wrong_ctrl_key() {
	_need_ebof || return 0
	expect_fail "wrong controller key" nvme connect -t tcp -a "$E_IP" -s "$PLAIN_PORT" -n "$SNQN" \
		--hostnqn="$H_AUTH" --hostid="$ID_AUTH" --dhchap-secret="$E_KEY_AUTH" --dhchap-ctrl-secret="$E_KEY_CTRL_WRONG"
}
e_tls_keyring() {
	_need_ebof || return 0
	sec_connect tls "$SNQN" "$E_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls
	sec_io ebof-tls
	sec_disconnect "$SNQN"
	# reconnect: the data written over the first connection reads back intact
	sec_connect tls "$SNQN" "$E_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls
	sec_io ebof-tls "${FIO_MB}M" --verify_only
	sec_disconnect "$SNQN"
}
e_tls_cmdline() { _need_ebof || return 0; cid tls "$SNQN" "$E_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls --tls-key="$E_TLS_TLS"; }
e_tls_wrong_psk() {
	_need_ebof || return 0
	if [[ $SEC_TARGET == kernel ]]; then
		step_skip "reference run: host and kernel target share one keyring, a wrong PSK cannot be set up"
		return 0
	fi
	expect_fail "wrong PSK" nvme connect -t tcp -a "$E_IP" -s "$TLS_PORT" -n "$SNQN" \
		--hostnqn="$H_BAD" --hostid="$ID_BAD" --tls
}
e_tls_plaintext() {
	_need_ebof || return 0
	expect_fail "plaintext connect to the TLS-required port" nvme connect -t tcp -a "$E_IP" \
		-s "$TLS_PORT" -n "$SNQN" --hostnqn="$H_TLS" --hostid="$ID_TLS"
}
# T1 of the 2026-11 review: ebof serves with tls_rekey_records = 16 (256 KiB per key), so a busy
# TLS queue crosses the KeyUpdate threshold many times a second. The kernel host reads through
# kTLS, which takes no KeyUpdate: ebof must keep its key (tls_key_update = "peer"), and the host
# must see no error, reset or reconnect. fio writes and verifies (verify_backlog: reads of what
# was written, interleaved) for SEC_REKEY_SECS seconds.
REKEY_SECS=${SEC_REKEY_SECS:-60}
e_tls_rekey() {
	_need_ebof || return 0
	local rc=0 bad
	guest_request ebof-tls-stats mark 60 || fail "ebof-tls-stats mark (host side)"
	sec_connect tls "$SNQN" "$E_IP" "$TLS_PORT" "$H_TLS" "$ID_TLS" --tls
	kmsg_mark
	FIO_TIMEOUT=$((REKEY_SECS + 120)) fio_verify sec-rekey "$NSDEV" 32M randwrite 16k 8 \
		--time_based --runtime="$REKEY_SECS" --verify_backlog=64 || rc=$?
	echo "kernel since the fio start:"
	kmsg_since | sed 's/^/    k /'
	bad=$(kmsg_since | grep -iE 'nvme.*(reset|reconnect|timeout|error|fail)|tls.*(error|fail)' || true)
	sec_disconnect "$SNQN"
	if [[ ${SEC_TLS_KEY_UPDATE:-peer} == always ]]; then
		echo "EXPERIMENT (tls_key_update = always): fio status $rc; kernel lines above"
		guest_request ebof-tls-stats check 60 || true
		return 0
	fi
	((rc == 0)) || fail "fio over TLS past the KeyUpdate threshold failed (status $rc)"
	[[ -z $bad ]] || fail "the kernel host logged errors/resets over TLS: $bad"
	guest_request ebof-tls-stats check 60 || fail "ebof's TLS record stats (host side, above)"
}
e_tls_auth() {
	_need_ebof || return 0
	cid tls,auth,ctrl "$SNQN" "$E_IP" "$TLS_PORT" "$H_AUTH" "$ID_AUTH" --tls --dhchap-secret="$E_KEY_AUTH" \
		--dhchap-ctrl-secret="$E_KEY_CTRL"
}

# Issue 34 item 5, the shape of blktests nvme/061: the subsystem RNQN is removed with `ebof ctl` on
# the running box while the host is connected, then added back. Linux 6.10+ deletes the
# controller when a reconnect's Connect fails with DNR set ("Removing controller (16770)" for
# 0x4182, nvmf_should_reconnect); ebof must refuse it with DNR clear, so the host retries every
# --reconnect-delay and comes back live by itself. A read issued during the outage waits
# (multipath queues while the controller is connecting) and completes; the data written before
# the removal reads back intact.
READD_SECS=${SEC_READD_SECS:-20}
ctrl_state() { cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone; }
_ctrl_in() { [[ $(ctrl_state "$1") == "$2" ]]; }
# (`|| true` inside: grep -c fails on no match, and the ERR trap would print into the number)
_kmsg_count_ge() {
	local n
	n=$(kmsg_since | grep -cE "$1" || true)
	((n >= $2))
}
e_readd() {
	_need_ebof || return 0
	if [[ $SEC_TARGET == kernel ]]; then
		step_skip "reference run: the kernel target is not managed with ebof ctl"
		return 0
	fi
	local c dd_pid dd_rc=0 t0 secs
	sec_connect plain "$RNQN" "$E_IP" "$PLAIN_PORT" "$H_READD" "$ID_READD" \
		--reconnect-delay=1 --ctrl-loss-tmo=60 --keep-alive-tmo=5
	c=$CTRL
	sec_io readd 4M
	kmsg_mark
	guest_request readd remove 60 || fail "ebof ctl subsystem remove (host side)"
	wait_for 15 _ctrl_in "$c" connecting ||
		fail "$c is '$(ctrl_state "$c")' 15 s after the removal, not connecting"
	echo "$c: connecting"
	# I/O during the outage: queued by the multipath head, completes once a path is back
	timeout -k 5 120 dd if="$NSDEV" of=/dev/null bs=4k count=64 iflag=direct status=none &
	dd_pid=$!
	# at least two refused reconnects in a row: the host goes on after a refusal
	wait_for 15 _kmsg_count_ge "Failed reconnect attempt" 2 ||
		fail "the host did not retry twice within 15 s (state $(ctrl_state "$c"))"
	kmsg_since | sed 's/^/    k /'
	kmsg_since | grep -q "Removing controller" && fail "the host gave up on $c (Removing controller)"
	_ctrl_in "$c" connecting || fail "$c is '$(ctrl_state "$c")', not connecting"
	guest_request readd add 60 || fail "ebof ctl subsystem add + ns add (host side)"
	t0=$(_us)
	wait_for "$READD_SECS" _ctrl_in "$c" live ||
		fail "$c is '$(ctrl_state "$c")' $READD_SECS s after the subsystem came back, not live"
	secs=$(_secs $(($(_us) - t0)))
	echo "$c live again $secs s after the subsystem came back"
	wait "$dd_pid" || dd_rc=$?
	((dd_rc == 0)) || fail "the read issued during the outage failed (status $dd_rc)"
	wait_for 20 _nvme_has_ns "$RNQN" 1 || fail "no namespace 1 block device for $RNQN after the reconnect"
	NSDEV=/dev/$(nvme_ns_for "$RNQN" 1)
	run nvme list-subsys
	nvme list-subsys | grep -A6 -F "$RNQN" | grep -q ' live' || fail "nvme list-subsys shows no live path of $RNQN"
	sec_io readd 4M --verify_only
	sec_io readd-after 2M --offset=8M
	kmsg_since | grep -q "Removing controller" && fail "the host logged Removing controller"
	sec_disconnect "$RNQN"
	printf 'readd\t%s\n' "$secs" >>"$X/seen.tsv"
}

the_end() {
	tlshd_stop
	echo "tlshd log (last 40 lines):"
	tail -n 40 "$X/tlshd.log" || true
	if [[ -s $X/skipped.txt ]]; then
		echo "SKIPPED steps:"
		cat "$X/skipped.txt"
	fi
}

step "modules, tlshd, versions" setup
step "keys with nvme-cli (DH-HMAC-CHAP, TLS PSK into .nvme)" gen_keys
step "kernel target: $KNQN, ports $PLAIN_PORT (plain) and $TLS_PORT (TLS)" kernel_target
step "kernel: DH-HMAC-CHAP one-way" k_oneway
step "kernel: DH-HMAC-CHAP two-way" k_twoway
step "kernel: wrong host key refused" k_wrong_host_key
step "kernel: wrong controller key refused" k_wrong_ctrl_key
step "kernel: no key refused" k_no_key
step "kernel: TLS, PSK from the keyring, fio verify ${FIO_MB} MiB" k_tls_keyring
step "kernel: TLS, --tls-key on the command line" k_tls_cmdline
step "kernel: plaintext to the TLS port refused" k_tls_plaintext
step "kernel: TLS + DH-HMAC-CHAP two-way" k_tls_auth
step "kernel: secure channel concatenation (--concat), informative" k_concat
step "ebof host tools against the kernel target (host side)" guest_request host-tools "" 600
step "ebof serve: keys, config, start (host side; SEC_TARGET=$SEC_TARGET)" ebof_start
step "ebof: DH-HMAC-CHAP one-way" e_oneway
step "ebof: DH-HMAC-CHAP two-way" e_twoway
step "ebof: wrong host key refused" e_wrong_host_key
step "ebof: wrong controller key refused" e_wrong_ctrl_key
step "ebof: TLS, PSK from the keyring, fio verify, reconnect, verify again" e_tls_keyring
step "ebof: TLS, --tls-key on the command line" e_tls_cmdline
step "ebof: wrong PSK refused" e_tls_wrong_psk
step "ebof: plaintext to the TLS-required port refused" e_tls_plaintext
step "ebof: TLS + DH-HMAC-CHAP two-way" e_tls_auth
step "ebof: TLS past the KeyUpdate threshold (16 records), fio verify ${REKEY_SECS} s, no reset" e_tls_rekey
step "ebof: subsystem removed and re-added, the host reconnects by itself (issue 34)" e_readd
step "tlshd log" the_end
# replicated volumes (issue 34) in this boot (linux-security.sh; EBOF_INTEROP_MIRROR=0 leaves them out)
if [[ ${MIRROR:-} == 1 ]]; then
	# shellcheck source=linux-mirror.guest.sh
	source "$X/mirror.guest.sh"
	mirror_steps
fi
