#!/bin/bash
# A stand-in for an RDMA-capable `ebof`, built from the guest kernel's own NVMe/RDMA stack, to check
# the RDMA scenarios' ebof steps before ebof has RDMA (never part of CI; it proves the harness, not
# ebof):
#   EBOF_BIN=$PWD/tests/interop/ebof-rdma-standin.sh tests/interop/run-all.sh linux-rdma linux-rdma2
# It runs inside the guest and understands only what those scenarios call:
#   serve --config F --print-config   prints F (so the RDMA listener is "accepted")
#   serve --config F                  nvmet-rdma (port 9) on F's address/port, F's NQN with one
#                                     file namespace of F's size on tmpfs; SIGTERM tears it down
#   discover --help                   mentions -t, --transport
#   discover -t rdma -a A -s S        nvme discover
#   identify -t rdma -a A -s S -n N   nvme connect + id-ctrl + disconnect
#   perf -t rdma -a A -s S -n N --rw RW --bs BS --qd QD --runtime T --range 0-SIZE --verify
#                                     nvme connect + fio write+verify + disconnect
set -euo pipefail
NVMET=/sys/kernel/config/nvmet
sub=${1:-}
shift || true
declare -A o=()
while (($#)); do
	case $1 in
	--help | --print-config | --verify) o[$1]=1 ;;
	-*) o[$1]=${2:-} && shift ;;
	esac
	shift
done
_conf() { sed -n "s/^$1 *= *\"\{0,1\}\([^\"]*\)\"\{0,1\}$/\1/p" "${o[--config]}" | head -n1; }
_dev() { # the block device of NQN's namespace 1 after a connect
	local b
	for _ in $(seq 100); do
		for b in /sys/block/nvme*n1; do
			[[ ${b##*/} == nvme*c*n* ]] && continue # native multipath's hidden path devices
			[[ -r $b/device/subsysnqn && $(<"$b/device/subsysnqn") == "$1" ]] && echo "/dev/${b##*/}" && return 0
		done
		sleep 0.2
	done
	return 1
}

case $sub in
serve)
	[[ -n ${o[--print-config]:-} ]] && { cat "${o[--config]}"; exit 0; }
	addr=$(_conf address) port=$(_conf port) nqn=$(_conf nqn) size=$(_conf size)
	s=$NVMET/subsystems/$nqn p=$NVMET/ports/9 img=/tmp/standin-$$.img
	truncate -s "$size" "$img"
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" && mkdir "$s/namespaces/1"
	echo -n "$img" >"$s/namespaces/1/device_path"
	echo 1 >"$s/namespaces/1/buffered_io" # 6.1's tmpfs has no O_DIRECT
	echo 1 >"$s/namespaces/1/enable"
	mkdir "$p" && echo rdma >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam"
	echo "$addr" >"$p/addr_traddr" && echo "$port" >"$p/addr_trsvcid"
	ln -s "$s" "$p/subsystems/$nqn"
	echo "standin: nvmet-rdma serves $nqn ($size file) on rdma $addr:$port"
	down() {
		rm -f "$p/subsystems/$nqn" && rmdir "$p"
		echo 0 >"$s/namespaces/1/enable" && rmdir "$s/namespaces/1" && rmdir "$s" && rm -f "$img"
		echo "standin: stopped"
		exit 0
	}
	trap down TERM INT
	sleep infinity &
	wait $! || true
	;;
discover)
	[[ -n ${o[--help]:-} ]] && { echo "  -t, --transport <TRANSPORT>  tcp | rdma (stand-in)"; exit 0; }
	nvme discover -t "${o[-t]}" -a "${o[-a]}" -s "${o[-s]}"
	;;
identify | perf)
	nqn=${o[-n]}
	nvme connect -t "${o[-t]}" -a "${o[-a]}" -s "${o[-s]}" -n "$nqn" >/dev/null
	trap 'nvme disconnect -n "$nqn" >/dev/null' EXIT
	dev=$(_dev "$nqn")
	if [[ $sub == identify ]]; then
		nvme id-ctrl "$dev" | grep -vE "^(ps|  *rwt|  *active_power)"
	else
		range=${o[--range]:-0-16M}
		fio --name=standin --filename="$dev" --ioengine=libaio --direct=1 --rw="${o[--rw]}" --bs="${o[--bs]}" \
			--iodepth="${o[--qd]}" --size="${range#*-}" --runtime="${o[--runtime]}" --verify=crc32c \
			--verify_fatal=1 --do_verify=1 --eta=never --minimal |
			awk -F';' '{ printf "standin perf: read %s KiB/s, write %s KiB/s\n", $7, $48 }'
	fi
	;;
*)
	echo "ebof-rdma-standin: '$sub' is not stood in for" >&2
	exit 2
	;;
esac
