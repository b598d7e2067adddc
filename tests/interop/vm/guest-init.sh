#!/bin/bash
# PID 1 of the interop guest after switch_root (see initramfs-init). Copied into the per-run exchange
# folder by lib.sh (vm_run) and run from /xchg. It prepares the guest (mounts, network, NVMe modules),
# runs the scenario's guest script (/xchg/guest.sh), writes its exit status to /xchg/status and
# powers off. Everything it prints goes to the virtio console, which the host streams.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb
exec </dev/null >/dev/hvc0 2>&1

X=/xchg
# shellcheck disable=SC1091
source "$X/env"

# die MESSAGE [STATUS]: the guest's status is STATUS (default 125) and it powers off
die() {
	echo "guest-init: $1"
	echo "${2:-125}" >"$X/.status.tmp" && mv "$X/.status.tmp" "$X/status"
	sync
	/bin/busybox poweroff -f
}

mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
modprobe configfs 2>/dev/null
mount -t configfs configfs /sys/kernel/config 2>/dev/null || echo "guest-init: no configfs"
hostname ebof-guest
echo "guest-init: up after $(cut -d' ' -f1 /proc/uptime) s (kernel $(uname -r))"
cut -d' ' -f1 /proc/uptime >"$X/booted"

# The binary under test: the host copied it into the run's guest-ebof folder (9p tag "ebof"); it is
# mounted at one fixed path whatever the flavour and wherever the host's checkout lives (a host
# path under /tmp or /run would not be visible: both are fresh tmpfs here). EBOF_BIN (from env) is
# /ebof/ebof, or empty when the host had no binary.
# unreachable WHAT PATH: the one line saying so, then the scenario fails (status 1)
unreachable() {
	echo "interop: $1 not reachable in the guest at $2"
	die "$1 missing" 1
}
_ebof_dir=${GUEST_EBOF_DIR:-/ebof}
if ! mkdir -p "$_ebof_dir" ||
	! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro,cache=loose ebof "$_ebof_dir"; then
	unreachable "the ebof share (9p tag ebof)" "$_ebof_dir"
fi
if [[ -n ${EBOF_BIN:-} && ! -x $EBOF_BIN ]]; then
	unreachable "the ebof binary" "$EBOF_BIN"
fi

# network: first virtio-net interface gets the guest address
modprobe virtio_net || die "modprobe virtio_net failed"
ip link set lo up
iface=
for _ in $(seq 50); do
	for n in /sys/class/net/*; do
		n=${n##*/}
		[[ $n != lo ]] && iface=$n && break 2
	done
	sleep 0.1
done
[[ -n $iface ]] || die "no network interface"
ip addr add "${GUEST_IP:-10.77.0.2}/24" dev "$iface"
ip link set "$iface" up

# NVMe host modules; short timeouts so a broken target fails fast instead of hanging 60 s
# shellcheck disable=SC2086 # NVME_CORE_ARGS: extra nvme-core parameters (e.g. multipath=N), split on spaces
modprobe nvme-core admin_timeout="${NVME_ADMIN_TIMEOUT:-10}" io_timeout="${NVME_IO_TIMEOUT:-30}" ${NVME_CORE_ARGS:-} ||
	die "modprobe nvme-core failed"
modprobe nvme-fabrics || die "modprobe nvme-fabrics failed"
modprobe nvme-tcp || die "modprobe nvme-tcp failed"

cd "$X" || die "no $X"
boot_lines=$(dmesg | wc -l)
echo "guest-init: running guest script (${GUEST_SCRIPT_NAME:-guest.sh}) at $(cut -d" " -f1 /proc/uptime) s"
bash "$X/guest.sh"
rc=$?
echo "guest-init: guest script exited with status $rc after $(cut -d' ' -f1 /proc/uptime) s uptime"
dmesg >"$X/dmesg.txt" 2>&1
if ((rc != 0)); then
	echo "guest-init: kernel messages since the guest script started (last 60):"
	dmesg | tail -n +$((boot_lines + 1)) | tail -n 60
fi
echo "$rc" >"$X/.status.tmp" && mv "$X/.status.tmp" "$X/status"
sync
/bin/busybox poweroff -f
