# shellcheck shell=bash
# Host-side library for the kernel interop scenarios (sourced, never run).
#
# Method (see docs/kernel-interop.md): a QEMU TCG guest boots Debian's own kernel, with the
# machine's own / shared read-only over virtio-9p plus a tmpfs overlay as its root filesystem, and a
# tap device inside a network namespace created for the run. Host-side programs (our target, our host
# tools) run inside that namespace with `ns_exec`.
#
# What the guest gets from the checkout reaches it one way only, wherever the checkout lives (its
# /tmp is a fresh tmpfs, so a host path under /tmp is not there): the guest scripts and helpers are
# copied into the exchange folder (/xchg), and the binary under test ($EBOF_BIN) is copied into
# $RUN_DIR/guest-ebof, shared read-only at /ebof; the guest's EBOF_BIN is always /ebof/ebof.
#
#   interop_init NAME       root check, run dir, netns + tap, cleanup trap
#   vm_setup                idempotent: apt packages, kernel, vmlinux, initramfs in .vm-cache
#                           (VM_FLAVOUR=trixie before vm_setup: Debian trixie's kernel + a trixie root
#                           filesystem built with mmdebstrap)
#   vm_env VAR=VALUE ...    variables exported to the guest script
#   vm_run SCRIPT TIMEOUT   boot the guest running SCRIPT; returns the guest script's exit status
#                           ($EBOF_BIN, when set, must be an executable file: it is the guest's
#                           /ebof/ebof; with EBOF_INTEROP_STRICT=1 a missing one stops the run)
#   vm_start NAME SCRIPT [--xchg DIR --ip IP --tap TAP --mac MAC ...]; vm_wait TIMEOUT NAME...
#                           several guests at once (ns_bridge N: a bridge with N taps first)
#   vm_want_rdma            (before vm_setup) also install rdma-core & co for soft-RoCE guests
#   host_on_<name>          define to serve `guest_request <name>` from the guest (dashes -> _)
#   bg_start NAME CMD...    start a tracked background process (killed by PID on exit); bg_stop NAME
#   ns_exec CMD...          run a command inside the run's network namespace
#   raw_icreq_check IP PORT send an NVMe/TCP ICReq from the netns, check the ICResp
#
# Knobs: EBOF_VM_CACHE (default <repo>/.vm-cache), EBOF_VM_REFRESH=1 (re-fetch the kernel),
# EBOF_VM_KERNEL_PKG (e.g. linux-image-6.1.0-56-amd64), EBOF_VM_BOOT=vmlinux|bzimage,
# EBOF_VM_MEM (MiB, default 2048), EBOF_VM_SMP (default 2), EBOF_INTEROP_KEEP=1 (keep the run dir),
# EBOF_INTEROP_ARTIFACTS=DIR (copy logs/timings/facts to DIR/NAME at exit), EBOF_INTEROP_STRICT=1
# (missing ebof subcommands fail instead of being skipped).
# Trixie flavour: VM_FLAVOUR=trixie (or EBOF_VM_FLAVOUR), EBOF_VM_MIRROR / EBOF_VM_SECURITY_MIRROR
# (default: the mirror this machine's apt uses), EBOF_VM_TRIXIE_EXTRA="pkg pkg" (more guest packages).

INTEROP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$INTEROP_DIR/../.." && pwd)
VM_CACHE=${EBOF_VM_CACHE:-$REPO_ROOT/.vm-cache}
export NO_COLOR=${NO_COLOR:-1} # plain logs from ebof (tracing) and friends
HOST_IP=10.77.0.1
GUEST_IP=10.77.0.2
# The one way the binary under test reaches a guest: a copy in $RUN_DIR/guest-ebof, shared
# read-only (9p tag "ebof") and mounted by guest-init at this fixed path.
GUEST_EBOF_DIR=/ebof
GUEST_EBOF_BIN=$GUEST_EBOF_DIR/ebof

# Debian packages the host needs; the guest uses the same userland (it is the host's /).
VM_PACKAGES=(qemu-system-x86 nvme-cli fio busybox-static cpio kmod iproute2 zstd xz-utils
	e2fsprogs util-linux coreutils gzip procps cryptsetup-bin)
# RDMA scenarios (soft-RoCE, rdma_rxe, inside the guest): the verbs/RDMA CM libraries, the rxe
# provider, ibv_devices/ibv_devinfo and rping; the `rdma` tool comes with iproute2. vm_want_rdma
# (before vm_setup) adds them.
VM_RDMA_PACKAGES=(rdma-core ibverbs-providers ibverbs-utils libibverbs1 librdmacm1 rdmacm-utils)
vm_want_rdma() { VM_PACKAGES+=("${VM_RDMA_PACKAGES[@]}"); }
# modules loaded by the initramfs (dependencies are resolved with modprobe --show-depends)
VM_INITRAMFS_MODULES=(virtio_pci virtio_console 9pnet_virtio 9p overlay)

# VM_FLAVOUR=bookworm (default): the machine's own / is the guest's root, Debian's kernel from the
# machine's own apt sources. VM_FLAVOUR=trixie: Debian trixie's kernel (6.12: DH-HMAC-CHAP, NVMe/TCP
# TLS) and a trixie root filesystem (nvme-cli 2.13, tlshd, keyutils, fio) built with mmdebstrap.
VM_FLAVOUR=${VM_FLAVOUR:-${EBOF_VM_FLAVOUR:-bookworm}}
# the trixie guest's packages (the root filesystem is rebuilt when this list changes). busybox:
# guest-init's poweroff; libssl3t64: a bookworm-built ebof linking libssl.so.3 runs in the guest.
# linux-fleet: nvme-stas (stafd/stacd) with avahi-daemon (+ avahi-utils' avahi-browse) on dbus, and
# udev (systemd-udevd run by hand: nvme-stas follows the kernel's events through libudev;
# systemd-standalone-sysusers satisfies udev without pulling systemd), lvm2, xfsprogs and
# rocksdb-tools (db_bench).
VM_TRIXIE_PACKAGES=(nvme-cli ktls-utils keyutils fio kmod iproute2 e2fsprogs util-linux procps
	busybox libssl3t64 openssl jq coreutils gawk sed grep
	nvme-stas avahi-daemon avahi-utils dbus udev systemd-standalone-sysusers lvm2 xfsprogs rocksdb-tools)

RUN_DIR='' X='' NS='' INTEROP_NAME='' VM_KERNEL='' VM_KDIR='' VM_INITRD='' VM_KVER=''
VM_ROOTFS=/ VM_MODDIR=''
VM_ENV=()
declare -A BG_PIDS=()
TRACKED_PIDS=()

log() { printf '[interop %s] %s\n' "$(date +%T)" "$*"; }
warn() { printf '[interop %s] WARNING: %s\n' "$(date +%T)" "$*" >&2; }
die() {
	printf '[interop %s] ERROR: %s\n' "$(date +%T)" "$*" >&2
	exit 1
}

# ---------------------------------------------------------------------------------------------
# timings: timing_add LABEL SECONDS; timing_summary prints them (also kept in $RUN_DIR/timings.tsv)
TIMINGS=()
timing_add() {
	TIMINGS+=("$(printf '%-64s %6ss' "$1" "$2")")
	[[ -n $RUN_DIR ]] && printf '%s\t%s\n' "$1" "$2" >>"$RUN_DIR/timings.tsv"
	return 0
}
timing_summary() {
	local t
	echo "---- timings (${INTEROP_NAME:-interop}) ----"
	for t in "${TIMINGS[@]}"; do echo "  $t"; done
	local name xdir
	for name in "${VM_NAMES[@]}"; do
		xdir=${VM_XDIR[$name]}
		[[ -s $xdir/guest-timings.tsv ]] || continue
		echo "  guest steps ($name):"
		awk -F'\t' '{ printf "    %-62s %6ss  %s\n", $1, $2, $3 }' "$xdir/guest-timings.tsv"
	done
}

# ---------------------------------------------------------------------------------------------
# setup: packages, kernel, initramfs

_need_root() { ((EUID == 0)) || die "must run as root (netns, tap, apt)"; }

_apt_ensure() {
	local p missing=()
	for p in "$@"; do
		[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "apt-get install ${missing[*]}"
	apt-get update -qq || warn "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
		>/dev/null || die "apt-get install ${missing[*]} failed"
}

# the versioned image package linux-image-amd64 depends on (bookworm: linux-image-6.1.0-NN-amd64)
_kernel_pkg() {
	local pkg
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	if [[ -z $pkg ]]; then
		apt-get update -qq >/dev/null 2>&1 || true
		pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	fi
	[[ -n $pkg ]] || die "cannot resolve the package linux-image-amd64 depends on"
	echo "$pkg"
}

# _extract_vmlinux BZIMAGE OUT: find the compressed payload and decompress it to an ELF vmlinux
# (the method of the kernel's scripts/extract-vmlinux)
_extract_vmlinux() {
	local img=$1 out=$2 magic tool pos
	for spec in '\xfd7zXZ\x00:xz -dcq' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dcq'; do
		magic=${spec%%:*} tool=${spec#*:}
		# shellcheck disable=SC2013 # offsets, one per line
		for pos in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1); do
			# shellcheck disable=SC2086 # $tool is a command with options
			tail -c +$((pos + 1)) "$img" | $tool >"$out" 2>/dev/null
			[[ $(head -c 4 "$out" | od -An -tx1 | tr -d ' ') == 7f454c46 ]] && return 0
		done
	done
	rm -f "$out"
	return 1
}

# _build_initramfs KROOT KVER OUT
_build_initramfs() {
	local kroot=$1 kver=$2 out=$3 d p
	d=$(mktemp -d)
	mkdir -p "$d"/{bin,dev,proc,sys,modules,lower,upper,newroot}
	cp /bin/busybox "$d/bin/busybox"
	cp "$INTEROP_DIR/vm/initramfs-init" "$d/init"
	chmod 0755 "$d/init"
	for p in "${VM_INITRAMFS_MODULES[@]}"; do
		modprobe -d "$kroot" -S "$kver" --show-depends "$p" || { rm -rf "$d"; die "modprobe --show-depends $p failed"; }
	done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$d/paths"
	# busybox insmod loads plain .ko files: decompress .ko.xz / .ko.zst (trixie ships .ko.xz)
	while read -r p; do
		case $p in
		*.ko.xz) xz -dc "$p" >"$d/modules/$(basename "$p" .xz)" ;;
		*.ko.zst) zstd -qdc "$p" >"$d/modules/$(basename "$p" .zst)" ;;
		*.ko.gz) gzip -dc "$p" >"$d/modules/$(basename "$p" .gz)" ;;
		*) cp "$p" "$d/modules/" ;;
		esac
		p=${p%.xz} p=${p%.zst} p=${p%.gz}
		basename "$p" >>"$d/modules/order"
	done <"$d/paths"
	rm "$d/paths"
	(cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp" && mv "$out.tmp" "$out"
	rm -rf "$d"
}

# ---------------------------------------------------------------------------------------------
# the trixie flavour: a private apt configuration (the machine's own sources stay untouched) and a
# root filesystem built with mmdebstrap

# _host_mirror [security]: the Debian mirror this machine's apt uses (deb822 .sources or one-line
# sources.list), e.g. http://deb.debian.org/debian; with "security", the debian-security one
_host_mirror() {
	local want=${1:-main} uri
	uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ { for (i = 2; i <= NF; i++) print $i }'
		sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null)
	if [[ $want == security ]]; then
		uri=$(grep -m1 -E '/debian-security/?$' <<<"$uri")
		echo "${uri:-http://deb.debian.org/debian-security}"
	else
		uri=$(grep -m1 -E '/debian/?$' <<<"$uri")
		echo "${uri:-http://deb.debian.org/debian}"
	fi
}

TRIXIE_APT_DIR=''
# _trixie_apt_setup: a private apt state in $VM_CACHE/apt-trixie with trixie, trixie-updates and
# trixie-security from the machine's mirror (keys: the machine's debian-archive-keyring has trixie's)
_trixie_apt_setup() {
	local d=$VM_CACHE/apt-trixie m ms
	m=${EBOF_VM_MIRROR:-$(_host_mirror)} ms=${EBOF_VM_SECURITY_MIRROR:-$(_host_mirror security)}
	mkdir -p "$d"/{parts,prefs,state/lists/partial,cache/archives/partial}
	printf 'deb %s trixie main\ndeb %s trixie-updates main\ndeb %s trixie-security main\n' "$m" "$m" "$ms" \
		>"$d/sources.list"
	TRIXIE_APT_DIR=$d
}
# _tapt apt-get|apt-cache ARGS...: run apt against the private trixie configuration
_tapt() {
	local tool=$1 d=$TRIXIE_APT_DIR
	shift
	"$tool" -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/parts" \
		-o Dir::Etc::Preferences="$d/nonexistent" -o Dir::Etc::PreferencesParts="$d/prefs" \
		-o Dir::State="$d/state" -o Dir::State::status=/dev/null -o Dir::Cache="$d/cache" \
		-o APT::Sandbox::User=root "$@"
}
# _trixie_kernel_pkg: the versioned image package trixie's linux-image-amd64 depends on
_trixie_kernel_pkg() {
	local pkg
	if [[ ! -e $TRIXIE_APT_DIR/state/updated || -n ${EBOF_VM_REFRESH:-} ]]; then
		_tapt apt-get update -qq >/dev/null || die "apt-get update (trixie, $TRIXIE_APT_DIR) failed"
		touch "$TRIXIE_APT_DIR/state/updated"
	fi
	pkg=$(_tapt apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	[[ -n $pkg ]] || die "cannot resolve the package trixie's linux-image-amd64 depends on"
	echo "$pkg"
}

# _trixie_rootfs: $VM_CACHE/trixie-rootfs, rebuilt when the package list or the mirror changes
_trixie_rootfs() {
	local dir=$VM_CACHE/trixie-rootfs m ms recipe t0=$SECONDS
	m=${EBOF_VM_MIRROR:-$(_host_mirror)} ms=${EBOF_VM_SECURITY_MIRROR:-$(_host_mirror security)}
	# shellcheck disable=SC2206 # a space-separated list on purpose
	local pkgs=("${VM_TRIXIE_PACKAGES[@]}" ${EBOF_VM_TRIXIE_EXTRA:-})
	recipe="v1 minbase ${pkgs[*]} $m $ms"
	if [[ -e $dir/.ready && $(cat "$dir/.recipe" 2>/dev/null) == "$recipe" ]]; then
		VM_ROOTFS=$dir
		return 0
	fi
	_apt_ensure mmdebstrap
	log "building the trixie root filesystem with mmdebstrap (${pkgs[*]})"
	rm -rf "$dir" "$dir.tmp"
	local IFS=,
	mmdebstrap --mode=root --variant=minbase --aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--include="${pkgs[*]}" trixie "$dir.tmp" "deb $m trixie main" "deb $m trixie-updates main" \
		"deb $ms trixie-security main" >"$VM_CACHE/trixie-rootfs.log" 2>&1 ||
		{ tail -n 20 "$VM_CACHE/trixie-rootfs.log"; die "mmdebstrap failed (log: $VM_CACHE/trixie-rootfs.log)"; }
	unset IFS
	mv "$dir.tmp" "$dir"
	printf '%s' "$recipe" >"$dir/.recipe"
	touch "$dir/.ready"
	VM_ROOTFS=$dir
	timing_add "trixie root filesystem (mmdebstrap)" $((SECONDS - t0))
	log "trixie root filesystem ready: $(du -sh "$dir" | cut -f1) in $((SECONDS - t0)) s"
}

# vm_setup: idempotent; sets VM_KVER VM_KDIR VM_KERNEL VM_INITRD VM_MODDIR VM_ROOTFS
vm_setup() {
	_need_root
	local t0=$SECONDS pkg kver kdir current
	_apt_ensure "${VM_PACKAGES[@]}"
	mkdir -p "$VM_CACHE"
	exec {_vm_lock}>"$VM_CACHE/.lock"
	flock -w 900 "$_vm_lock" || die "cannot lock $VM_CACHE"

	case $VM_FLAVOUR in
	bookworm) current=$VM_CACHE/current ;;
	trixie)
		current=$VM_CACHE/current-trixie
		_trixie_apt_setup
		_trixie_rootfs
		;;
	*) die "unknown VM_FLAVOUR '$VM_FLAVOUR' (bookworm or trixie)" ;;
	esac

	if [[ -n ${EBOF_VM_KERNEL_PKG:-} ]]; then
		pkg=$EBOF_VM_KERNEL_PKG
	elif [[ -z ${EBOF_VM_REFRESH:-} && -s $current && -e $VM_CACHE/$(cat "$current")/ready ]]; then
		pkg=$(cat "$current") # offline-friendly: reuse what we fetched last time
	elif [[ $VM_FLAVOUR == trixie ]]; then
		pkg=$(_trixie_kernel_pkg)
	else
		pkg=$(_kernel_pkg)
	fi
	kdir=$VM_CACHE/$pkg
	if [[ ! -e $kdir/ready || -n ${EBOF_VM_REFRESH:-} ]]; then
		local tk=$SECONDS
		log "fetching kernel package $pkg"
		rm -rf "$kdir" && mkdir -p "$kdir/deb"
		if [[ $VM_FLAVOUR == trixie ]]; then
			(cd "$kdir/deb" && _tapt apt-get download "$pkg" >/dev/null) || die "apt-get download $pkg (trixie) failed"
		else
			(cd "$kdir/deb" && apt-get download -o APT::Sandbox::User=root "$pkg" >/dev/null) ||
				die "apt-get download $pkg failed"
		fi
		dpkg -x "$kdir"/deb/*.deb "$kdir/root" || die "dpkg -x failed"
		rm -rf "$kdir/deb"
		# merged-/usr packages (trixie) keep the modules in usr/lib/modules
		[[ ! -e $kdir/root/lib && -d $kdir/root/usr/lib/modules ]] && ln -s usr/lib "$kdir/root/lib"
		kver=$(find "$kdir/root/lib/modules/" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | head -n1)
		[[ -n $kver ]] || die "no modules directory in $pkg"
		cp "$kdir/root/boot/vmlinuz-$kver" "$kdir/bzImage"
		_extract_vmlinux "$kdir/bzImage" "$kdir/vmlinux" || warn "could not extract vmlinux; will boot bzImage"
		depmod -b "$kdir/root" "$kver" || die "depmod failed"
		echo "$kver" >"$kdir/kver"
		touch "$kdir/ready"
		timing_add "kernel fetch + unpack ($pkg)" $((SECONDS - tk))
	fi
	echo "$pkg" >"$current"
	kver=$(cat "$kdir/kver")
	# rebuilt when what goes into it changes (by content, not mtime: a fresh checkout's files are
	# all newer than the cache it shares through EBOF_VM_CACHE)
	local ikey
	ikey=$(cat "$INTEROP_DIR/vm/initramfs-init" /bin/busybox | sha256sum | cut -c1-16)
	ikey+=" ${VM_INITRAMFS_MODULES[*]}"
	if [[ ! -s $kdir/initramfs.cpio.gz || $(cat "$kdir/initramfs.key" 2>/dev/null) != "$ikey" ]]; then
		_build_initramfs "$kdir/root" "$kver" "$kdir/initramfs.cpio.gz"
		printf '%s' "$ikey" >"$kdir/initramfs.key"
	fi
	flock -u "$_vm_lock"
	exec {_vm_lock}>&-

	# shellcheck disable=SC2034 # VM_KDIR: for scenarios (the unpacked kernel package)
	VM_KVER=$kver VM_KDIR=$kdir VM_INITRD=$kdir/initramfs.cpio.gz
	VM_MODDIR=$(realpath "$kdir/root/lib/modules")
	if [[ ${EBOF_VM_BOOT:-vmlinux} == vmlinux && -s $kdir/vmlinux ]]; then
		VM_KERNEL=$kdir/vmlinux
	else
		VM_KERNEL=$kdir/bzImage
	fi
	timing_add "vm_setup ($VM_FLAVOUR, $pkg)" $((SECONDS - t0))
	log "vm ready: $VM_FLAVOUR, kernel $VM_KVER ($(basename "$VM_KERNEL")), root $VM_ROOTFS, cache $VM_CACHE ($((SECONDS - t0)) s)"
}

# ---------------------------------------------------------------------------------------------
# run dir, netns, background processes, cleanup

# interop_init NAME: root check, run dir ($RUN_DIR, exchange folder $X), netns with tap0, trap
interop_init() {
	_need_root
	INTEROP_NAME=$1
	RUN_DIR=$(mktemp -d "/tmp/ebof-interop-$1.XXXXXX")
	X=$RUN_DIR/xchg
	mkdir -p "$X"
	trap _interop_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	ns_setup
	log "run dir $RUN_DIR, netns $NS"
}

ns_setup() {
	NS=ebof-interop-$$-$RANDOM
	ip netns add "$NS" || die "ip netns add $NS failed"
	ip -n "$NS" link set lo up
	ip -n "$NS" tuntap add dev tap0 mode tap || die "cannot create tap0 in $NS"
	ip -n "$NS" addr add "$HOST_IP/24" dev tap0
	ip -n "$NS" link set tap0 up
}

# ns_bridge N: for N concurrent guests, a bridge br0 in the netns with taps tap0..tap(N-1); the
# host side's $HOST_IP moves from tap0 to br0. Guests on it reach each other (and the host side).
ns_bridge() {
	local n=$1 i
	ip -n "$NS" link add br0 type bridge || die "cannot create br0 in $NS"
	ip -n "$NS" addr del "$HOST_IP/24" dev tap0
	ip -n "$NS" link set tap0 master br0
	for ((i = 1; i < n; i++)); do
		ip -n "$NS" tuntap add dev "tap$i" mode tap || die "cannot create tap$i in $NS"
		ip -n "$NS" link set "tap$i" master br0
		ip -n "$NS" link set "tap$i" up
	done
	ip -n "$NS" addr add "$HOST_IP/24" dev br0
	ip -n "$NS" link set br0 up
}

ns_exec() { ip netns exec "$NS" "$@"; }

# _kill_pid PID: TERM, wait up to 5 s, KILL; only if it is still our child
_kill_pid() {
	local pid=$1 i ppid
	kill -0 "$pid" 2>/dev/null || return 0
	ppid=$(awk '{ print $4 }' "/proc/$pid/stat" 2>/dev/null)
	[[ $ppid == "$BASHPID" ]] || return 0 # not ours any more (exited and reused)
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		[[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) == Z ]] && break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}

# bg_start NAME CMD...: start CMD in the background (stdout+stderr to $RUN_DIR/NAME.log). CMD must be
# a program (e.g. `ip netns exec "$NS" prog ...`), not a shell function, so that the PID is its own.
bg_start() {
	local name=$1
	shift
	"$@" >>"$RUN_DIR/$name.log" 2>&1 </dev/null &
	BG_PIDS[$name]=$!
	TRACKED_PIDS+=($!)
}
bg_pid() { echo "${BG_PIDS[$1]:-}"; }
bg_alive() { [[ -n ${BG_PIDS[$1]:-} ]] && kill -0 "${BG_PIDS[$1]}" 2>/dev/null; }
bg_stop() {
	[[ -n ${BG_PIDS[$1]:-} ]] || return 0
	_kill_pid "${BG_PIDS[$1]}"
	unset "BG_PIDS[$1]"
}
# print the tail of a background process' log
bg_log_tail() { [[ -s $RUN_DIR/$1.log ]] && { echo "---- last ${2:-40} lines of $1.log ----"; tail -n "${2:-40}" "$RUN_DIR/$1.log"; }; }

_interop_cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${TRACKED_PIDS[@]}"; do _kill_pid "$pid"; done
	if [[ -n $NS ]]; then
		# anything left in the namespace was started by us; the namespace goes once they are gone
		for pid in $(ip netns pids "$NS" 2>/dev/null); do _kill_pid "$pid"; done
		ip netns del "$NS" 2>/dev/null || warn "could not delete netns $NS"
	fi
	if [[ -n $RUN_DIR && -d $RUN_DIR ]]; then
		if [[ -n ${EBOF_INTEROP_ARTIFACTS:-} ]]; then # logs, timings, guest facts (not disk images)
			mkdir -p "$EBOF_INTEROP_ARTIFACTS/$INTEROP_NAME" &&
				(cd "$RUN_DIR" && find . -path ./guest-ebof -prune -o -type f ! -name '*.img' -size -64M \
					-exec cp --parents {} "$EBOF_INTEROP_ARTIFACTS/$INTEROP_NAME/" \;)
		fi
		if [[ -n ${EBOF_INTEROP_KEEP:-} ]]; then
			log "kept run dir $RUN_DIR"
		else
			rm -rf "$RUN_DIR"
		fi
	fi
	exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# the guest

# vm_env VAR=VALUE...: exported into the guest script's environment
vm_env() { VM_ENV+=("$@"); }

# _serve_requests [XDIR]: answer guest_request calls (files req-NAME in the exchange folder XDIR,
# default $X) by running the host_on_NAME function with the request's argument (X is XDIR while it
# runs); the reply done-NAME holds its exit status
_serve_requests() {
	local X=${1:-$X} req name fn arg rc t0
	for req in "$X"/req-*; do
		[[ -e $req ]] || continue
		name=${req##*/req-}
		arg=$(cat "$req")
		rm -f "$req"
		fn=host_on_${name//-/_}
		t0=$SECONDS
		if ! declare -F "$fn" >/dev/null; then
			log "guest request '$name': no host function $fn"
			rc=127
		else
			log "guest request '$name' ${arg:+($arg) }-> $fn"
			if "$fn" "$arg"; then rc=0; else rc=$?; fi
			log "guest request '$name' done: status $rc ($((SECONDS - t0)) s)"
		fi
		timing_add "host: $name (status $rc)" $((SECONDS - t0))
		echo "$rc" >"$X/.done-$name" && mv "$X/.done-$name" "$X/done-$name"
	done
}

# _guest_ebof: fill $RUN_DIR/guest-ebof (the guest's /ebof) once per run and set VM_EBOF_BIN,
# the guest's EBOF_BIN: $GUEST_EBOF_BIN when $EBOF_BIN is an executable file (copied, so a rebuild
# during the run does not change what the guest runs), else empty (the guest's ebof steps skip, as
# on the host). With EBOF_INTEROP_STRICT=1 a set but missing binary stops the scenario before boot.
VM_EBOF_BIN=''
_guest_ebof() {
	local d=$RUN_DIR/guest-ebof t0=$SECONDS
	[[ -d $d ]] && return 0
	mkdir -p "$d"
	VM_EBOF_BIN=''
	if [[ -n ${EBOF_BIN:-} && -f $EBOF_BIN && -x $EBOF_BIN ]]; then
		cp "$EBOF_BIN" "$d/ebof" || die "interop: cannot copy $EBOF_BIN into $d"
		VM_EBOF_BIN=$GUEST_EBOF_BIN
		timing_add "host: copy $EBOF_BIN for the guest" $((SECONDS - t0))
	elif [[ -n ${EBOF_BIN:-} ]]; then
		if [[ -n ${EBOF_INTEROP_STRICT:-} && $EBOF_INTEROP_STRICT != 0 ]]; then
			die "interop: ebof binary not an executable file at $EBOF_BIN (build: cargo build --release -p ebof)"
		fi
		warn "no executable ebof binary at $EBOF_BIN: the guest has none (its ebof steps skip)"
	fi
}

# Guests started by vm_start, by NAME: qemu's PID, exchange folder, console tail, start time, boot
# time, and (after vm_wait) the exit status.
declare -A VM_PID=() VM_XDIR=() VM_TAIL=() VM_T0=() VM_BOOTED=() VM_STATUS=() VM_SERIAL=() VM_QLOG=()
VM_NAMES=()

# vm_start NAME SCRIPT [--xchg DIR] [--ip IP] [--tap TAP] [--mac MAC] [--smp N] [--mem MIB]
#          [--prefix] [VAR=VALUE...]
# Boot a guest in the background that runs SCRIPT. Defaults: the run's exchange folder $X, $GUEST_IP,
# tap0, 52:54:00:77:00:02, EBOF_VM_SMP (2) CPUs, EBOF_VM_MEM (2048) MiB. VAR=VALUE: exported to this
# guest only (after vm_env's). --prefix: console lines go to stdout as "[NAME] line" (for
# concurrent guests). Logs: $RUN_DIR/{console,serial,qemu}-NAME.log. vm_wait waits for it.
vm_start() {
	local name=$1 script=$2 xdir=$X ip=$GUEST_IP tap=tap0 mac=52:54:00:77:00:02 prefix=''
	local smp=${EBOF_VM_SMP:-2} mem=${EBOF_VM_MEM:-2048} extra=() v pid
	shift 2
	while (($#)); do
		case $1 in
		--xchg) xdir=$2 && shift ;;
		--ip) ip=$2 && shift ;;
		--tap) tap=$2 && shift ;;
		--mac) mac=$2 && shift ;;
		--smp) smp=$2 && shift ;;
		--mem) mem=$2 && shift ;;
		--prefix) prefix=1 ;;
		*=*) extra+=("$1") ;;
		*) die "vm_start: unknown argument '$1'" ;;
		esac
		shift
	done
	[[ -f $script ]] || die "no guest script $script"
	[[ -n $VM_KERNEL ]] || die "vm_setup not run"
	[[ -z ${VM_PID[$name]:-} ]] || die "vm_start: a guest '$name' was already started"
	for v in "${VM_ENV[@]}" "${extra[@]}"; do
		[[ $v != EBOF_BIN=* ]] || die "vm_start: do not pass EBOF_BIN to the guest: it is always $GUEST_EBOF_BIN (lib.sh copies \$EBOF_BIN there)"
	done
	_guest_ebof
	mkdir -p "$xdir"
	rm -f "$xdir"/status "$xdir"/booted "$xdir"/req-* "$xdir"/done-*
	cp "$INTEROP_DIR/vm/guest-init.sh" "$xdir/guest-init.sh"
	cp "$INTEROP_DIR/guest-lib.sh" "$xdir/guest-lib.sh"
	cp "$INTEROP_DIR/guest-security.sh" "$xdir/guest-security.sh"
	cp "$INTEROP_DIR/guest-rdma.sh" "$xdir/guest-rdma.sh"
	cp "$script" "$xdir/guest.sh"
	{
		for v in "HOST_IP=$HOST_IP" "GUEST_IP=$ip" "X=/xchg" "GUEST_LIB=/xchg/guest-lib.sh" \
			"GUEST_SCRIPT_NAME=$(basename "$script")" "VM_FLAVOUR=$VM_FLAVOUR" "GUEST_NAME=$name" \
			"GUEST_EBOF_DIR=$GUEST_EBOF_DIR" "EBOF_BIN=$VM_EBOF_BIN" "${VM_ENV[@]}" "${extra[@]}"; do
			printf 'export %s=%q\n' "${v%%=*}" "${v#*=}"
		done
	} >"$xdir/env"

	local console=$RUN_DIR/console-$name.log serial=$RUN_DIR/serial-$name.log qlog=$RUN_DIR/qemu-$name.log
	: >"$console"
	local cmdline="console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init mitigations=off"
	cmdline+=" tsc=reliable no_timer_check nowatchdog random.trust_cpu=on 8250.nr_uarts=1"
	# shellcheck disable=SC2054 # commas belong to qemu options
	local qemu=(qemu-system-x86_64 -accel tcg,thread=single -cpu "${EBOF_VM_CPU:-max}" -machine pc
		-smp "$smp" -m "$mem"
		-nodefaults -no-user-config -display none -vga none -no-reboot
		-kernel "$VM_KERNEL" -initrd "$VM_INITRD" -append "$cmdline"
		-serial "file:$serial"
		-device virtio-serial-pci -chardev "file,id=con0,path=$console" -device virtconsole,chardev=con0
		-fsdev "local,id=fsroot,path=$VM_ROOTFS,security_model=none,readonly=on,multidevs=remap"
		-device virtio-9p-pci,fsdev=fsroot,mount_tag=rootfs
		-fsdev "local,id=fsmod,path=$VM_MODDIR,security_model=none,readonly=on"
		-device virtio-9p-pci,fsdev=fsmod,mount_tag=modules
		-fsdev "local,id=fsx,path=$xdir,security_model=none"
		-device virtio-9p-pci,fsdev=fsx,mount_tag=xchg
		-fsdev "local,id=fsebof,path=$RUN_DIR/guest-ebof,security_model=none,readonly=on"
		-device virtio-9p-pci,fsdev=fsebof,mount_tag=ebof
		-netdev "tap,id=net0,ifname=$tap,script=no,downscript=no,vhost=off"
		-device "virtio-net-pci,netdev=net0,mac=$mac,event_idx=off")
	# event_idx=off: under TCG at high packet rates (fio QD32) QEMU 7.2's virtio-net once in a
	# few runs stopped both queues for good (the guest answered no ARP, its nvme host retried
	# "failed to connect socket: -110" until ctrl_loss_tmo): the lost-notification race of the
	# event index (QEMU 06b12970174 and its follow-up). Plain notifications cost nothing here.

	log "booting guest '$name' ($ip on $tap, -smp $smp -m $mem)"
	# a simple command (not a function) so that $! is qemu itself: ip netns exec execs it
	ip netns exec "$NS" "${qemu[@]}" >"$qlog" 2>&1 </dev/null &
	pid=$!
	TRACKED_PIDS+=("$pid")
	if [[ -n $prefix ]]; then
		tail -n +1 -F -s 0.2 --pid="$pid" "$console" 2>/dev/null | sed -u "s/^/[$name] /" &
	else
		tail -n +1 -F -s 0.2 --pid="$pid" "$console" 2>/dev/null &
	fi
	VM_TAIL[$name]=$!
	TRACKED_PIDS+=("$!")
	VM_PID[$name]=$pid VM_XDIR[$name]=$xdir VM_T0[$name]=$SECONDS VM_BOOTED[$name]=''
	VM_SERIAL[$name]=$serial VM_QLOG[$name]=$qlog
	VM_NAMES+=("$name")
}

# vm_wait TIMEOUT NAME...: wait until every guest NAME has powered off, answering their
# guest_request calls; a guest still running TIMEOUT s after its start is killed. Sets
# VM_STATUS[NAME] (the guest script's exit status: 124 on timeout, 125 if the guest died without
# writing one); returns the first non-zero one of them (in NAME order), else 0.
vm_wait() {
	local timeout=$1 name pid running rc=0 r
	shift
	while :; do
		running=0
		for name in "$@"; do
			pid=${VM_PID[$name]}
			[[ -n ${VM_STATUS[$name]:-} ]] && continue
			if [[ -z ${VM_BOOTED[$name]} && -e ${VM_XDIR[$name]}/booted ]]; then
				VM_BOOTED[$name]=$((SECONDS - VM_T0[$name]))
				timing_add "vm '$name': boot to guest init" "${VM_BOOTED[$name]}"
			fi
			_serve_requests "${VM_XDIR[$name]}"
			if kill -0 "$pid" 2>/dev/null && ((SECONDS - VM_T0[$name] >= timeout)); then
				warn "guest '$name' timed out after $timeout s; killing qemu (pid $pid)"
				_kill_pid "$pid"
				_vm_finish "$name" 124
			elif ! kill -0 "$pid" 2>/dev/null; then
				_vm_finish "$name"
			else
				running=1
			fi
		done
		((running)) || break
		sleep 0.2
	done
	for name in "$@"; do
		r=${VM_STATUS[$name]}
		((rc == 0 && r != 0)) && rc=$r
	done
	return "$rc"
}

# _vm_finish NAME [STATUS]: reap a guest that powered off (or was killed: STATUS 124), set VM_STATUS
_vm_finish() {
	local name=$1 pid=${VM_PID[$1]} xdir=${VM_XDIR[$1]} rc
	wait "$pid" 2>/dev/null
	_kill_pid "${VM_TAIL[$name]}" # normally already gone (--pid)
	wait "${VM_TAIL[$name]}" 2>/dev/null
	if [[ -s $xdir/status ]]; then
		rc=$(cat "$xdir/status")
	else
		rc=${2:-125}
	fi
	VM_STATUS[$name]=$rc
	timing_add "vm '$name': total (status $rc)" $((SECONDS - VM_T0[$name]))
	grep -m1 -a '^interop: .* not reachable in the guest' "$RUN_DIR/console-$name.log" 2>/dev/null |
		while read -r line; do warn "guest '$name': $line"; done
	if [[ -z ${VM_BOOTED[$name]} ]]; then
		warn "guest '$name' never reached guest init"
		[[ -s ${VM_QLOG[$name]} ]] && { echo "---- qemu output ----"; tail -n 20 "${VM_QLOG[$name]}"; }
		echo "---- last lines of the guest kernel log (${VM_SERIAL[$name]}) ----"
		tail -n 40 "${VM_SERIAL[$name]}" 2>/dev/null
	fi
	log "guest '$name' finished: status $rc ($((SECONDS - VM_T0[$name])) s)"
}

# vm_run GUEST_SCRIPT [TIMEOUT_SECS]: boot the guest running GUEST_SCRIPT and wait for it; the
# console is streamed to stdout and $RUN_DIR/console-NAME.log (NAME: the script's name without
# .sh); returns the script's exit status (124 on timeout, 125 if the guest died without writing a
# status).
vm_run() {
	local name
	name=$(basename "$1" .sh)
	vm_start "$name" "$1"
	vm_wait "${2:-600}" "$name"
}

# ---------------------------------------------------------------------------------------------
# checks usable from any scenario

# wait_listen PORT [TIMEOUT] [PID]: wait until something listens on TCP PORT inside the netns
wait_listen() {
	local port=$1 timeout=${2:-30} pid=${3:-} end=$((SECONDS + ${2:-30}))
	while ((SECONDS < end)); do
		[[ -n $(ns_exec ss -Hltn "sport = :$port" 2>/dev/null) ]] && return 0
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			warn "process $pid exited before listening on port $port"
			return 1
		fi
		sleep 0.2
	done
	warn "nothing listens on port $port after $timeout s"
	return 1
}

# raw_icreq_check IP PORT: from inside the netns, open a TCP connection, send a 128-byte NVMe/TCP
# ICReq (type 0, hlen 128, plen 128, pfv 0, hpda 0, no digests, maxr2t 0) and check the ICResp
# (type 1, hlen 128, plen 128). Prints the ICResp's CPDA, digest and MAXH2CDATA fields.
raw_icreq_check() {
	local ip=$1 port=$2 hex
	# shellcheck disable=SC2016 # $0/$1 expand in the inner bash
	hex=$(ns_exec timeout 10 bash -c '
		exec 3<>"/dev/tcp/$0/$1" || exit 2
		{ printf "\x00\x00\x80\x00\x80\x00\x00\x00"; head -c 120 /dev/zero; } >&3
		head -c 128 <&3 | od -An -v -tx1
		exec 3>&-
	' "$ip" "$port" | tr -s ' \n' ' ')
	# shellcheck disable=SC2206 # split on purpose
	local b=($hex)
	if ((${#b[@]} != 128)); then
		warn "ICReq to $ip:$port: got ${#b[@]} bytes instead of a 128-byte ICResp"
		return 1
	fi
	if [[ ${b[0]} != 01 || ${b[2]} != 80 || ${b[4]}${b[5]}${b[6]}${b[7]} != 80000000 ]]; then
		warn "ICReq to $ip:$port: bad ICResp header: ${b[*]:0:16}"
		return 1
	fi
	log "ICResp from $ip:$port: pfv=0x${b[9]}${b[8]} cpda=$((16#${b[10]})) dgst=0x${b[11]} maxh2cdata=$((16#${b[15]}${b[14]}${b[13]}${b[12]}))"
}

# ---------------------------------------------------------------------------------------------
# host-side steps (results collected for host_summary)
HOST_RESULTS=() HOST_FAILED=0 HOST_SKIPPED=0

# host_step TITLE CMD...: run CMD on the host side, inside the netns (a shell function runs as is,
# a program under `timeout ${HOST_CMD_TIMEOUT:-300}`); returns its status
host_step() {
	local title=$1 t0=$SECONDS rc
	shift
	echo
	echo "==== host: $title ===="
	echo "+ $*"
	if [[ $(type -t "$1") == function ]]; then
		if "$@"; then rc=0; else rc=$?; fi
	else
		if timeout -k 5 "${HOST_CMD_TIMEOUT:-300}" ip netns exec "$NS" "$@"; then rc=0; else rc=$?; fi
	fi
	_host_result "$title" "$rc" $((SECONDS - t0))
	return "$rc"
}
_host_result() {
	local word=OK
	if (($2 != 0)); then
		word="FAIL(status $2)"
		HOST_FAILED=$((HOST_FAILED + 1))
	fi
	HOST_RESULTS+=("$(printf '%-60s %5ss  %s' "$1" "$3" "$word")")
	timing_add "host: $1 [$word]" "$3"
	echo "---- host: $word in $3 s"
}

# ebof_step TITLE SUBCOMMAND ARGS...: host_step TITLE $EBOF_BIN SUBCOMMAND ARGS..., skipped (not
# failed) while the binary or the subcommand does not exist yet, unless EBOF_INTEROP_STRICT=1
ebof_step() {
	local title=$1 sub=$2
	if [[ ! -x ${EBOF_BIN:-} ]] || ! "$EBOF_BIN" "$sub" --help >/dev/null 2>&1; then
		if [[ -n ${EBOF_INTEROP_STRICT:-} ]]; then
			echo "==== host: $title: '${EBOF_BIN:-ebof} $sub' is not available (EBOF_INTEROP_STRICT)"
			_host_result "$title" 127 0
			return 127
		fi
		echo
		echo "==== host: $title: SKIPPED ('${EBOF_BIN:-ebof} $sub' not available yet)"
		HOST_SKIPPED=$((HOST_SKIPPED + 1))
		HOST_RESULTS+=("$(printf '%-60s %5ss  %s' "$title" 0 SKIP)")
		return 0
	fi
	shift
	host_step "$title" "$EBOF_BIN" "$@"
}

# serve_check_after RC: after the guest ran (status RC), the "target" serve must still run (a
# dead one fails a passing run); on failure, the tails of its log and of ctl.log. Returns the
# scenario's status.
serve_check_after() {
	local rc=$1
	if ! bg_alive target; then
		warn "ebof serve is not running any more"
		((rc == 0)) && rc=1
	fi
	if ((rc != 0)); then
		bg_log_tail target 60
		[[ -s $RUN_DIR/ctl.log ]] && { echo "---- ctl.log (last 60 lines) ----"; tail -n 60 "$RUN_DIR/ctl.log"; }
	fi
	return "$rc"
}

# need_ebof SCENARIO SUBCOMMAND...: exit 77 (skipped) unless $EBOF_BIN has every SUBCOMMAND; with
# EBOF_INTEROP_STRICT a missing one is fatal
need_ebof() {
	local name=$1 sub msg
	shift
	for sub in "$@"; do
		if [[ ! -x $EBOF_BIN ]] || ! "$EBOF_BIN" "$sub" --help >/dev/null 2>&1; then
			msg="'$EBOF_BIN $sub' is not available (build: cargo build --release -p ebof)"
			[[ -n ${EBOF_INTEROP_STRICT:-} ]] && die "$msg"
			log "SKIP $name: $msg"
			exit 77
		fi
	done
}

# make_api_cert DIR IP: a private CA ($DIR/ca.pem) and the box's HTTPS certificate for the
# management API at IP ($DIR/api-cert.pem, key $DIR/api-key.pem, 0600), with the openssl tool.
# The token never travels over plain HTTP beyond loopback (issue 32), so boxes the CSI
# controller reaches over the test network speak HTTPS.
make_api_cert() {
	local d=$1 ip=$2 ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
	(
		umask 077
		openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 \
			-subj "/CN=ebof interop CA" -addext basicConstraints=critical,CA:TRUE \
			-addext keyUsage=critical,keyCertSign,cRLSign &&
			openssl req "${ec[@]}" -keyout "$d/api-key.pem" -out "$d/api.csr" -subj "/CN=ebof" &&
			printf 'subjectAltName=IP:%s\n' "$ip" >"$d/api-ext.cnf" &&
			openssl x509 -req -in "$d/api.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
				-CAcreateserial -out "$d/api-cert.pem" -days 2 -extfile "$d/api-ext.cnf"
	) >"$d/make_api_cert.log" 2>&1 || { cat "$d/make_api_cert.log" >&2; return 1; }
	chmod 0644 "$d/ca.pem" "$d/api-cert.pem"
}

# serve_with_mgmt CONFIG PORT...: `ebof serve --config CONFIG` in the netns (background process
# "target") with its management API on $MGMT_SOCK ($RUN_DIR/mgmt.sock); waits until every PORT
# listens and the socket exists
MGMT_SOCK=''
serve_with_mgmt() {
	local config=$1 port i
	shift
	MGMT_SOCK=$RUN_DIR/mgmt.sock
	bg_start target ip netns exec "$NS" "$EBOF_BIN" serve --config "$config" --mgmt-socket "$MGMT_SOCK"
	log "ebof serve started (pid $(bg_pid target)), management socket $MGMT_SOCK"
	for port in "$@"; do
		wait_listen "$port" 30 "$(bg_pid target)" || { bg_log_tail target; return 1; }
	done
	for ((i = 0; i < 100; i++)); do
		[[ -S $MGMT_SOCK ]] && return 0
		sleep 0.1
	done
	warn "no management socket $MGMT_SOCK after 10 s"
	return 1
}

# The guest cannot reach the management socket (the 9p root is not a socket transport), so it asks
# the host: guest_request ctl "ARGS" runs `ebof ctl --socket $MGMT_SOCK ARGS` (ARGS split on spaces:
# NQNs, sizes, addresses and flags have none). stdout -> /xchg/ctl.out, stderr -> /xchg/ctl.err,
# both also in $RUN_DIR/ctl.log.
host_on_ctl() {
	local args rc
	read -r -a args <<<"$1"
	echo "+ ebof ctl ${args[*]}" >>"$RUN_DIR/ctl.log"
	timeout -k 5 30 "$EBOF_BIN" ctl --socket "$MGMT_SOCK" "${args[@]}" >"$X/.ctl.out" 2>"$X/.ctl.err"
	rc=$?
	cat "$X/.ctl.out" "$X/.ctl.err" >>"$RUN_DIR/ctl.log"
	echo "status $rc" >>"$RUN_DIR/ctl.log"
	mv "$X/.ctl.out" "$X/ctl.out" && mv "$X/.ctl.err" "$X/ctl.err"
	return "$rc"
}

host_summary() {
	local r
	((${#HOST_RESULTS[@]})) || return 0
	echo "---- host steps: $HOST_FAILED failed, $HOST_SKIPPED skipped ----"
	for r in "${HOST_RESULTS[@]}"; do echo "  $r"; done
}
