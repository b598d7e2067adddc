# shellcheck shell=bash
# Guest-side helpers for NVMe in-band authentication (DH-HMAC-CHAP) and NVMe/TCP TLS, for the trixie
# guest (VM_FLAVOUR=trixie: Linux 6.12, nvme-cli 2.13, tlshd from ktls-utils, keyutils). Sourced by a
# guest script after guest-lib.sh (vm_run copies it to /xchg/guest-security.sh). Facts behind these
# helpers: docs/kernel-interop.md, "DH-HMAC-CHAP and TLS in the trixie guest".
#
#   sec_modules                      nvme-auth, nvme-keyring (host), nvmet, nvmet-tcp, brd (target:
#                                    /dev/ram0 and /dev/ram1 of BRD_MIB, default 128)
#   tlshd_start / tlshd_stop         the TLS handshake daemon, keyrings=.nvme, log /xchg/tlshd.log
#   nvme_keyring                     the kernel's .nvme keyring id (created by nvme-keyring)
#   gen_dhchap_key NQN [HMAC] [LEN]  a DHHC-1 secret (nvme gen-dhchap-key; HMAC 0..3, LEN 32/48/64)
#   gen_tls_key HOSTNQN SUBNQN [HMAC] [IDENTITY] [--insert]
#                                    a configured PSK NVMeTLSkey-1:0HMAC:...: (nvme gen-tls-key);
#                                    with --insert, its retained PSK goes into .nvme as a "psk" key
#                                    described "NVMe0R0HMAC HOSTNQN SUBNQN" (IDENTITY 1: "NVMe1R0HMAC
#                                    HOSTNQN SUBNQN DIGEST"); tlshd links .nvme into each handshake's
#                                    session keyring, so no keyctl setperm is needed for .nvme
#   insert_tls_key KEY HOSTNQN SUBNQN [IDENTITY]  put an existing configured PSK's retained PSK in .nvme
#   tls_keys                         list the keys of .nvme (keyctl show)
#   kt_subsys NQN DEV                kernel target (nvmet) subsystem, namespace 1 = DEV, no host allowed
#   kt_host HOSTNQN [KEY] [CTRLKEY] [HASH] [DHGROUP]   a host entry with DH-HMAC-CHAP settings
#   kt_allow NQN HOSTNQN             let HOSTNQN into subsystem NQN
#   kt_port ID ADDR PORT [tls]       a TCP port (tls: addr_tsas=tls1.3, addr_treq=required), listening
#   kt_link ID NQN                   expose subsystem NQN on port ID
#   kt_teardown                      remove everything under nvmet's configfs
#   kmsg_mark / kmsg_since           the kernel log since the mark (to quote what a step caused)
#   expect_fail DESC CMD...          CMD must fail; its output and the kernel's messages are printed
#   want_kmsg DESC REGEX             the kernel logged REGEX since kmsg_mark
#   ctrl_tls_key CTRL                the keyring serial of the PSK the controller's TLS session used
#   (step_skip is in guest-lib.sh)

NVMET=/sys/kernel/config/nvmet
TLSHD_PID=''
TLSHD_CONF=/run/tlshd.conf
_KMSG_MARK=0

sec_modules() {
	run modprobe nvme-auth
	run modprobe nvme-keyring
	run modprobe nvmet
	run modprobe nvmet-tcp
	run modprobe brd rd_nr=2 rd_size=$((${BRD_MIB:-128} * 1024))
	wait_for 10 test -b /dev/ram0 || fail "no /dev/ram0"
	[[ -d $NVMET ]] || fail "no $NVMET (configfs not mounted?)"
	grep -E '^(nvme|nvmet)' /proc/modules | awk '{ print $1 }' | sort | tr '\n' ' '
	echo
}

nvme_keyring() { keyctl search @s keyring .nvme 2>/dev/null || awk '$9 == ".nvme:" { print strtonum("0x" $1) }' /proc/keys; }

# tlshd_start: tlshd handles the kernel's TLS handshake upcalls (netlink family "handshake") for
# both the host (nvme-tcp) and the target (nvmet-tcp); it finds PSKs in the keyrings named under
# [authenticate] keyrings=.
tlshd_start() {
	cat >"$TLSHD_CONF" <<-EOF
		[debug]
		loglevel=${TLSHD_LOGLEVEL:-2}
		tls=${TLSHD_TLS_DEBUG:-0}
		nl=0

		[authenticate]
		keyrings=.nvme
	EOF
	tlshd -c "$TLSHD_CONF" -s >>"$X/tlshd.log" 2>&1 &
	TLSHD_PID=$!
	sleep 0.5
	kill -0 "$TLSHD_PID" 2>/dev/null || { cat "$X/tlshd.log"; fail "tlshd exited"; }
	echo "tlshd running (pid $TLSHD_PID), config $TLSHD_CONF, log /xchg/tlshd.log"
}
tlshd_stop() {
	[[ -n $TLSHD_PID ]] || return 0
	kill "$TLSHD_PID" 2>/dev/null || true
	wait "$TLSHD_PID" 2>/dev/null || true
	TLSHD_PID=''
}

gen_dhchap_key() { nvme gen-dhchap-key --nqn="$1" --hmac="${2:-1}" ${3:+--key-length=$3}; }

gen_tls_key() {
	local h=$1 s=$2 hmac=${3:-1} ident=${4:-0} key
	key=$(nvme gen-tls-key --hostnqn="$h" --subsysnqn="$s" --hmac="$hmac" --identity="$ident" | tail -n 1)
	[[ $key == NVMeTLSkey-1:* ]] || fail "nvme gen-tls-key printed '$key'"
	if [[ ${5:-} == --insert ]]; then
		insert_tls_key "$key" "$h" "$s" "$ident" >&2
	fi
	echo "$key"
}

insert_tls_key() {
	local key=$1 h=$2 s=$3 ident=${4:-0} out
	out=$(nvme check-tls-key --keydata="$key" --hostnqn="$h" --subsysnqn="$s" --identity="$ident" --insert 2>&1) ||
		fail "nvme check-tls-key --insert failed: $out"
	echo "inserted: $out"
}

tls_keys() { keyctl show "$(nvme_keyring)"; }

kt_subsys() {
	local s=$NVMET/subsystems/$1
	mkdir "$s"
	echo 0 >"$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n "$2" >"$s/namespaces/1/device_path"
	echo 1 >"$s/namespaces/1/enable"
}

kt_host() {
	local h=$NVMET/hosts/$1
	[[ -d $h ]] || mkdir "$h"
	[[ -n ${2:-} ]] && echo -n "$2" >"$h/dhchap_key"
	[[ -n ${3:-} ]] && echo -n "$3" >"$h/dhchap_ctrl_key"
	[[ -n ${4:-} ]] && echo -n "$4" >"$h/dhchap_hash"
	[[ -n ${5:-} ]] && echo -n "$5" >"$h/dhchap_dhgroup"
	local f
	for f in dhchap_hash dhchap_dhgroup; do [[ -r $h/$f ]] && echo "host ${1##*:}: $f=$(<"$h/$f")"; done
	return 0
}

kt_allow() { ln -s "$NVMET/hosts/$2" "$NVMET/subsystems/$1/allowed_hosts/$2"; }

kt_port() {
	local p=$NVMET/ports/$1
	mkdir "$p"
	echo tcp >"$p/addr_trtype"
	echo ipv4 >"$p/addr_adrfam"
	echo "$2" >"$p/addr_traddr"
	echo "$3" >"$p/addr_trsvcid"
	if [[ ${4:-} == tls ]]; then
		echo tls1.3 >"$p/addr_tsas"
		echo required >"$p/addr_treq"
	fi
	echo "port $1: tcp $2:$3 treq=$(<"$p/addr_treq") tsas=$(cat "$p/addr_tsas" 2>/dev/null)"
}

kt_link() { ln -s "$NVMET/subsystems/$2" "$NVMET/ports/$1/subsystems/$2"; }

kt_teardown() {
	local l d
	for l in "$NVMET"/ports/*/subsystems/* "$NVMET"/subsystems/*/allowed_hosts/*; do
		[[ -L $l ]] && rm -f "$l"
	done
	for d in "$NVMET"/subsystems/*/namespaces/*; do
		[[ -d $d ]] && { echo 0 >"$d/enable"; rmdir "$d"; }
	done
	for d in "$NVMET"/subsystems/* "$NVMET"/ports/* "$NVMET"/hosts/*; do
		[[ -d $d ]] && rmdir "$d"
	done
	return 0
}

kmsg_mark() { _KMSG_MARK=$(dmesg | wc -l); }
kmsg_since() { dmesg | tail -n +$((_KMSG_MARK + 1)); }
want_kmsg() { kmsg_since | grep -qE "$2" || fail "$1: the kernel did not log /$2/ since the mark"; }
# (6.12 shows the attribute only on a TLS controller)
ctrl_tls_key() { cat "/sys/class/nvme/$1/tls_key" 2>/dev/null || true; }

# expect_fail DESC CMD...: CMD must fail (status != 0); prints its output and the kernel's messages
expect_fail() {
	local desc=$1 out rc=0
	shift
	kmsg_mark
	echo "+ $* (must fail: $desc)"
	out=$(timeout -k 5 "${EXPECT_FAIL_TIMEOUT:-60}" "$@" 2>&1) || rc=$?
	# shellcheck disable=SC2001 # every line of a multi-line output
	sed 's/^/    | /' <<<"$out"
	echo "    status $rc; kernel:"
	kmsg_since | sed 's/^/    k /'
	((rc != 0)) || fail "$desc: succeeded, must fail"
}

