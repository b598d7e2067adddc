#!/bin/bash
# Guest half of linux-initiator.sh: the stock Linux NVMe/TCP initiator (nvme-cli, fio, ext4) against
# the target at $TARGET_IP ($TARGET_PORT I/O, $DISC_PORT discovery), including nvme compare, copy and
# verify. Runs inside the QEMU guest.
#
# TARGET_MODE=ebof (default): our target runs on the host side of the tap; restarts go through
#   guest_request restart-target.
# TARGET_MODE=kernel: reference run; this script first sets up the guest kernel's own nvmet with the
#   same subsystems (brd RAM disk, file on tmpfs) on $TARGET_IP and restarts it itself. Used to check
#   the scenario (and to compare behaviour) without our target.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

RAM_NQN=${RAM_NQN:-nqn.2026-11.io.ebof:ram}
FILE_NQN=${FILE_NQN:-nqn.2026-11.io.ebof:file}
TARGET_MODE=${TARGET_MODE:-ebof}
RAM_MIB=512 FILE_MIB=256
MNT=/mnt/ebof

# ---------------------------------------------------------------------------------------------
# the reference target (TARGET_MODE=kernel)
NVMET=/sys/kernel/config/nvmet

kernel_port() { # kernel_port ID PORT: a TCP port on $TARGET_IP exposing both subsystems
	local p=$NVMET/ports/$1 nqn
	mkdir "$p"
	echo tcp >"$p/addr_trtype"
	echo ipv4 >"$p/addr_adrfam"
	echo "$TARGET_IP" >"$p/addr_traddr"
	echo "$2" >"$p/addr_trsvcid"
	for nqn in "$RAM_NQN" "$FILE_NQN"; do ln -s "$NVMET/subsystems/$nqn" "$p/subsystems/$nqn"; done
}
kernel_subsys() { # kernel_subsys NQN DEVICE_OR_FILE [buffered]
	local s=$NVMET/subsystems/$1
	mkdir "$s"
	echo 1 >"$s/attr_allow_any_host"
	mkdir "$s/namespaces/1"
	echo -n "$2" >"$s/namespaces/1/device_path"
	[[ ${3:-} == buffered ]] && echo 1 >"$s/namespaces/1/buffered_io" # tmpfs has no O_DIRECT on 6.1
	echo 1 >"$s/namespaces/1/enable"
}
kernel_target_setup() {
	run modprobe nvmet
	run modprobe nvmet-tcp
	run modprobe brd rd_nr=1 rd_size=$((RAM_MIB * 1024))
	run truncate -s "${FILE_MIB}M" /tmp/ebof-file-ns.img
	kernel_subsys "$RAM_NQN" /dev/ram0
	kernel_subsys "$FILE_NQN" /tmp/ebof-file-ns.img buffered
	kernel_port 1 "$TARGET_PORT"
	kernel_port 2 "$DISC_PORT"
	wait_for 10 _listening "$TARGET_PORT" || fail "kernel target does not listen on $TARGET_PORT"
}
_listening() { [[ -n $(ss -Hltn "sport = :$1") ]]; }
kernel_target_restart() { # take the subsystems off the ports and the namespaces down, then back
	local p nqn
	for p in 1 2; do for nqn in "$RAM_NQN" "$FILE_NQN"; do rm "$NVMET/ports/$p/subsystems/$nqn"; done; done
	for nqn in "$RAM_NQN" "$FILE_NQN"; do echo 0 >"$NVMET/subsystems/$nqn/namespaces/1/enable"; done
	for nqn in "$RAM_NQN" "$FILE_NQN"; do echo 1 >"$NVMET/subsystems/$nqn/namespaces/1/enable"; done
	for p in 1 2; do for nqn in "$RAM_NQN" "$FILE_NQN"; do
		ln -s "$NVMET/subsystems/$nqn" "$NVMET/ports/$p/subsystems/$nqn"
	done; done
}

restart_target() {
	if [[ $TARGET_MODE == kernel ]]; then
		kernel_target_restart
	else
		guest_request restart-target "" 120 || fail "the host could not restart the target"
	fi
}

# ---------------------------------------------------------------------------------------------
# steps

discover_on() { # discover_on PORT: both subsystems must be in the discovery log
	local out nqn
	out=$(run -t 60 nvme discover -t tcp -a "$TARGET_IP" -s "$1")
	echo "$out"
	for nqn in "$RAM_NQN" "$FILE_NQN"; do
		grep -qF "$nqn" <<<"$out" || fail "$nqn missing from the discovery log on port $1"
	done
}

expect_geometry() { # expect_geometry MIB BLOCK_SIZE: of $NSDEV, as the kernel sees it
	local b=${NSDEV#/dev/} mib lbs
	mib=$(($(<"/sys/block/$b/size") * 512 / 1048576))
	lbs=$(<"/sys/block/$b/queue/logical_block_size")
	echo "$NSDEV: $mib MiB, logical block size $lbs"
	((mib == $1)) || fail "$NSDEV is $mib MiB, expected $1 MiB"
	((lbs == $2)) || fail "$NSDEV has logical block size $lbs, expected $2"
}

connect_ram() {
	nvme_connect "$RAM_NQN"
	expect_geometry "$RAM_MIB" 512
}

admin_surface() {
	run nvme list
	run nvme list-subsys
	run nvme id-ctrl "/dev/$CTRL"
	run nvme id-ns "$NSDEV"
	run nvme smart-log "/dev/$CTRL"
	run nvme error-log "/dev/$CTRL"
	run nvme get-feature -f 7 "/dev/$CTRL"
	local subnqn
	subnqn=$(nvme id-ctrl "/dev/$CTRL" -o json | tr -d ' \n' | sed -n 's/.*"subnqn":"\([^"]*\)".*/\1/p')
	[[ $subnqn == "$RAM_NQN" ]] || fail "id-ctrl subnqn is '$subnqn', expected $RAM_NQN"
}

ext4_roundtrip() {
	local i
	run mkfs.ext4 -F -q "$NSDEV"
	mkdir -p "$MNT"
	run mount "$NSDEV" "$MNT"
	for i in 1 2 3 4; do
		run dd if=/dev/urandom of="$MNT/file$i" bs=1M count=2 status=none
	done
	mkdir -p "$MNT/dir/sub" && echo "hello ebof" >"$MNT/dir/sub/hello.txt"
	(cd "$MNT" && find . -type f ! -path './lost+found/*' -exec sha256sum {} + | sort -k2) >/tmp/ext4.sums
	cat /tmp/ext4.sums
	run umount "$MNT"
	run fsck.ext4 -n -f "$NSDEV"
	echo 3 >/proc/sys/vm/drop_caches
	run mount "$NSDEV" "$MNT"
	(cd "$MNT" && run sha256sum -c --quiet /tmp/ext4.sums) || fail "checksums differ after remount"
	echo "checksums verified after umount + fsck + mount"
	run umount "$MNT"
}

# Compare, Copy and Verify through nvme-cli on the RAM namespace (512-byte blocks; nvme-cli's
# block counts are 0's based). Skipped against the kernel's nvmet, which has none of them.
nvm_commands() {
	local oncs out pat=/tmp/pattern.bin other=/tmp/other.bin back=/tmp/back.bin
	oncs=$(nvme id-ctrl "/dev/$CTRL" -o json | tr -d ' \n' | sed -n 's/.*"oncs":\([0-9]*\).*/\1/p')
	echo "ONCS $oncs"
	if [[ $TARGET_MODE != ebof ]]; then
		echo "reference target (kernel nvmet): Compare/Copy/Verify not expected; skipped"
		return 0
	fi
	((oncs & 0x1 && oncs & 0x80 && oncs & 0x100)) || fail "ONCS $oncs lacks Compare, Verify or Copy"
	nvme id-ns "$NSDEV" -o json | tr -d ' \n' | grep -oE '"(mssrl|mcl|msrc)":[0-9]+' || true
	dd if=/dev/urandom of=$pat bs=4096 count=1 status=none
	dd if=/dev/urandom of=$other bs=4096 count=1 status=none
	run nvme write "$NSDEV" --start-block=2048 --block-count=7 --data-size=4096 --data=$pat
	run nvme compare "$NSDEV" --start-block=2048 --block-count=7 --data-size=4096 --data=$pat
	if out=$(nvme compare "$NSDEV" --start-block=2048 --block-count=7 --data-size=4096 \
		--data=$other 2>&1); then
		fail "compare of different data succeeded: $out"
	fi
	echo "$out"
	grep -qiE 'compare|0x[0-9a-f]*285' <<<"$out" || fail "miscompare not reported as Compare Failure"
	run nvme copy "$NSDEV" --sdlba=8192 --slbs=2048 --blocks=7
	run nvme read "$NSDEV" --start-block=8192 --block-count=7 --data-size=4096 --data=$back
	cmp $pat $back || fail "the copied blocks differ from the source"
	echo "copy: 8 blocks from LBA 2048 to LBA 8192, read back equal"
	run nvme verify "$NSDEV" --start-block=8192 --block-count=7
}

# One command larger than 128 KiB, as blktests' nvme/029 sends (513 KiB through nvme-cli: the
# kernel refuses it above the controller's MDTS), read back equal; ebof's MDTS is 1 MiB.
large_transfers() {
	local mdts
	mdts=$(nvme id-ctrl "/dev/$CTRL" -o json | tr -d ' \n' | sed -n 's/.*"mdts":\([0-9]*\).*/\1/p')
	echo "MDTS ${mdts:-?} (0: no limit; else 4 KiB << MDTS bytes)"
	if [[ $TARGET_MODE == ebof ]]; then
		((${mdts:-0} >= 8)) || fail "MDTS ${mdts:-?}: less than 1 MiB"
	fi
	dd if=/dev/urandom of=/tmp/big bs=1024 count=513 status=none
	run nvme write "$NSDEV" --start-block=16384 --block-count=1025 --data-size=525312 --data=/tmp/big
	run nvme read "$NSDEV" --start-block=16384 --block-count=1025 --data-size=525312 \
		--data=/tmp/big.back
	cmp /tmp/big /tmp/big.back || fail "the 513 KiB command read back differs"
	echo "513 KiB in one command, read back equal"
}

check_data_units_written() {
	local duw
	duw=$(smart_field "/dev/$CTRL" data_units_written)
	echo "smart-log data_units_written = ${duw:-?}"
	if [[ -z $duw || $duw -eq 0 ]]; then
		if [[ $TARGET_MODE == kernel ]]; then
			echo "(kernel reference target: brd does no I/O accounting, so 0 is expected)"
		else
			fail "smart-log data units written is ${duw:-missing} after writes"
		fi
	fi
}

connect_queues() {
	nvme_connect "$RAM_NQN" --nr-io-queues 2 --queue-size 128
	local qc sq
	qc=$(<"/sys/class/nvme/$CTRL/queue_count") sq=$(<"/sys/class/nvme/$CTRL/sqsize")
	echo "queue_count=$qc (admin + I/O) sqsize=$sq"
	((qc == 3)) || fail "expected 2 I/O queues (queue_count 3), got queue_count $qc"
	((sq == 127)) || fail "expected sqsize 127 (queue size 128), got $sq"
}

# the pattern job for persistence: same options for the write and the verify_only run
PATTERN_JOB=(--name=pattern --ioengine=libaio --direct=1 --rw=write --bs=128k --size=64M
	--iodepth=16 --verify=crc32c --verify_fatal=1 --randseed=8009 --eta=never)
region_sha() { dd if="$NSDEV" bs=1M count=64 iflag=direct status=none | sha256sum | cut -d' ' -f1; }

file_write_pattern() {
	nvme_connect "$FILE_NQN"
	expect_geometry "$FILE_MIB" 4096
	run fio --filename="$NSDEV" "${PATTERN_JOB[@]}" --do_verify=0
	run nvme flush "$NSDEV"
	region_sha >/tmp/pattern.sha
	echo "pattern region sha256 $(</tmp/pattern.sha)"
	nvme_disconnect "$FILE_NQN"
}

file_verify_pattern() {
	nvme_connect "$FILE_NQN"
	run fio --filename="$NSDEV" "${PATTERN_JOB[@]}" --verify_only
	local sha
	sha=$(region_sha)
	echo "pattern region sha256 $sha"
	[[ $sha == "$(</tmp/pattern.sha)" ]] || fail "file namespace content changed across the restart"
	nvme_disconnect "$FILE_NQN"
}

# ---------------------------------------------------------------------------------------------
echo "target: $TARGET_MODE at $TARGET_IP:$TARGET_PORT (discovery $DISC_PORT); subsystems $RAM_NQN $FILE_NQN"
[[ $TARGET_MODE == kernel ]] && step "set up the kernel reference target" kernel_target_setup

step "discover on the discovery port $DISC_PORT" discover_on "$DISC_PORT"
step "discover on the I/O port $TARGET_PORT" discover_on "$TARGET_PORT"

step "connect $RAM_NQN" connect_ram
step "admin: list, id-ctrl, id-ns, smart/error-log, get-feature 7" admin_surface
step "nvme compare, copy, verify" nvm_commands
step "fio 128 MiB randwrite 4k qd32 + verify" fio_verify rand4k "$NSDEV" 128M randwrite 4k 32
step "fio 128 MiB write 128k qd32 + verify" fio_verify seq128k "$NSDEV" 128M write 128k 32 --offset=256M
step "a 513 KiB command (blktests nvme/029), fio 1m" large_transfers
step "fio 64 MiB write 1m qd8 + verify" fio_verify seq1m "$NSDEV" 64M write 1m 8 --offset=384M
step "smart-log data units written > 0" check_data_units_written
step "blkdiscard" run blkdiscard "$NSDEV"
step "ext4: mkfs, files, fsck, remount, checksums" ext4_roundtrip
step "disconnect $RAM_NQN" nvme_disconnect "$RAM_NQN"

step "connect with header + data digests" nvme_connect "$RAM_NQN" --hdr-digest --data-digest
step "digests: fio 32 MiB randwrite 4k + verify" fio_verify dig4k "$NSDEV" 32M randwrite 4k 32
step "digests: fio 32 MiB write 128k + verify" fio_verify dig128k "$NSDEV" 32M write 128k 16 --offset=64M
step "disconnect (digests)" nvme_disconnect "$RAM_NQN"

step "connect with 2 I/O queues of 128" connect_queues
step "queues: fio 32 MiB randwrite 4k qd64 + verify" fio_verify q4k "$NSDEV" 32M randwrite 4k 64
step "disconnect (queues)" nvme_disconnect "$RAM_NQN"

step "file namespace: write a pattern, flush, disconnect" file_write_pattern
step "restart the target" restart_target
step "file namespace: reconnect and verify the pattern" file_verify_pattern
