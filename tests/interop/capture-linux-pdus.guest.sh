#!/bin/bash
# Guest half of capture-linux-pdus.sh: a short session of the stock Linux initiator against our
# target, once plain and once with header + data digests, so the host can record the bytes.
# shellcheck source=guest-lib.sh
source "$GUEST_LIB"

session() { # session TITLE [NVME CONNECT ARGS]
	local title=$1
	shift
	step "$title: connect" nvme_connect "$NQN" "$@"
	step "$title: 8 KiB write + read + flush" bash -c \
		"dd if=/dev/urandom of=/tmp/blk bs=8k count=1 status=none &&
		 dd if=/tmp/blk of=$NSDEV bs=8k count=1 oflag=direct status=none &&
		 dd if=$NSDEV of=/tmp/back bs=8k count=1 iflag=direct status=none &&
		 cmp /tmp/blk /tmp/back && nvme flush $NSDEV -n 1"
	step "$title: disconnect" nvme_disconnect "$NQN"
}

session plain
session digests --hdr-digest --data-digest
