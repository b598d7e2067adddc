#!/usr/bin/env bash
# Build the ebof container image: one `ebof` binary (box, CSI controller and CSI node roles) at
# /usr/local/bin/ebof on a Debian bookworm root with what the CSI node plugin runs (nvme-cli,
# e2fsprogs, xfsprogs, util-linux/mount, kmod). No container registry is reachable from the
# machines this is built on, so there is no base image to pull: the root filesystem is made with
# mmdebstrap from the Debian mirror this machine's apt uses, imported with `podman import`, and
# saved as an OCI archive.
#
#   deploy/container/build.sh            -> image localhost/ebof:VERSION (podman's local storage)
#                                           and target/container/ebof-VERSION.oci.tar
#
# Knobs: EBOF_BIN (default target/release/ebof), EBOF_IMAGE (default localhost/ebof:VERSION, VERSION
# from `ebof --version`), EBOF_IMAGE_EXTRA="pkg pkg" (more Debian packages, e.g. "libibverbs1
# librdmacm1 ibverbs-providers" for RDMA boxes), EBOF_VM_CACHE (default <repo>/.vm-cache: the root
# filesystem is cached there, rebuilt when the package list or the mirror changes),
# EBOF_VM_MIRROR / EBOF_VM_SECURITY_MIRROR (default: the mirror this machine's apt uses),
# EBOF_PODMAN_OPTS (extra global podman options, e.g. "--storage-driver vfs").
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
build_start=$SECONDS
log() { printf '[container %s] %s\n' "$(date +%T)" "$*"; }
die() {
	printf '[container %s] ERROR: %s\n' "$(date +%T)" "$*" >&2
	exit 1
}

EBOF_BIN=${EBOF_BIN:-$REPO/target/release/ebof}
[[ -x $EBOF_BIN ]] || die "no ebof binary at $EBOF_BIN (cargo build --release -p ebof, or set EBOF_BIN)"
version=$("$EBOF_BIN" --version | awk '{ print $2 }')
[[ -n $version ]] || die "$EBOF_BIN --version printed no version"
IMAGE=${EBOF_IMAGE:-localhost/ebof:$version}
OUT_DIR=$REPO/target/container
ARCHIVE=$OUT_DIR/ebof-$version.oci.tar
CACHE=${EBOF_VM_CACHE:-$REPO/.vm-cache}
ROOTFS=$CACHE/container-bookworm-rootfs
# shellcheck disable=SC2206 # EBOF_PODMAN_OPTS: a space-separated list on purpose
PODMAN=(podman ${EBOF_PODMAN_OPTS:-})

# What the image holds besides ebof. libssl3: ebof links libssl.so.3 (NVMe/TCP TLS); mount: mount,
# umount; util-linux: blkid, findmnt, losetup; kmod: modprobe nvme-tcp; nvme-cli: nvme connect,
# gen-hostnqn; e2fsprogs: mkfs.ext4, resize2fs; xfsprogs: mkfs.xfs, xfs_growfs.
# shellcheck disable=SC2206 # EBOF_IMAGE_EXTRA: a space-separated list on purpose
PACKAGES=(libssl3 nvme-cli e2fsprogs xfsprogs util-linux mount kmod ${EBOF_IMAGE_EXTRA:-})

if ((EUID != 0)); then
	die "must run as root (mmdebstrap --mode=root, podman's system storage)"
fi
apt_ensure() {
	local p missing=()
	for p in "$@"; do
		[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "apt-get install ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
		die "apt-get install ${missing[*]} failed"
}
apt_ensure mmdebstrap podman

# The mirror: the one this machine's apt uses, found as the interop guests' trixie root finds it
# (tests/interop/lib.sh, _host_mirror).
# shellcheck source=tests/interop/lib.sh
mirror=${EBOF_VM_MIRROR:-$(. "$REPO/tests/interop/lib.sh" && _host_mirror)}
# shellcheck source=tests/interop/lib.sh
security=${EBOF_VM_SECURITY_MIRROR:-$(. "$REPO/tests/interop/lib.sh" && _host_mirror security)}

# ---- the root filesystem, cached by recipe (packages + mirrors)
mkdir -p "$CACHE" "$OUT_DIR"
exec {lock}>"$CACHE/.container.lock"
flock -w 900 "$lock" || die "cannot lock $CACHE/.container.lock"
recipe="v1 bookworm minbase ${PACKAGES[*]} $mirror $security"
if [[ -e $ROOTFS/.ready && $(cat "$ROOTFS/.recipe" 2>/dev/null) == "$recipe" ]]; then
	log "root filesystem: cached ($ROOTFS)"
else
	log "building the bookworm root filesystem with mmdebstrap (${PACKAGES[*]}) from $mirror"
	tr=$SECONDS
	rm -rf "$ROOTFS" "$ROOTFS.tmp"
	include_list=$(
		IFS=,
		echo "${PACKAGES[*]}"
	)
	mmdebstrap --mode=root --variant=minbase --aptopt='APT::Install-Recommends "false"' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--include="$include_list" bookworm "$ROOTFS.tmp" "deb $mirror bookworm main" \
		"deb $mirror bookworm-updates main" "deb $security bookworm-security main" \
		>"$CACHE/container-rootfs.log" 2>&1 ||
		{
			tail -n 20 "$CACHE/container-rootfs.log"
			die "mmdebstrap failed (log: $CACHE/container-rootfs.log)"
		}
	mv "$ROOTFS.tmp" "$ROOTFS"
	printf '%s' "$recipe" >"$ROOTFS/.recipe"
	touch "$ROOTFS/.ready"
	log "root filesystem ready: $(du -sh "$ROOTFS" | cut -f1) in $((SECONDS - tr)) s"
fi

# ---- the image: the cached root + the binary, as one layer
stage=$(mktemp -d "$OUT_DIR/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/usr/local/bin"
install -m 0755 "$EBOF_BIN" "$stage/usr/local/bin/ebof"
tar --numeric-owner -C "$ROOTFS" --exclude=./.recipe --exclude=./.ready -cf "$stage/root.tar" .
tar --numeric-owner --owner=0 --group=0 -C "$stage" -rf "$stage/root.tar" usr/local/bin/ebof
flock -u "$lock"

"${PODMAN[@]}" rmi -f "$IMAGE" >/dev/null 2>&1 || true
"${PODMAN[@]}" import --quiet \
	--change 'ENTRYPOINT ["/usr/local/bin/ebof"]' \
	--change 'CMD ["--help"]' \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change "LABEL org.opencontainers.image.title=ebof org.opencontainers.image.version=$version" \
	--message "ebof $version on Debian bookworm (deploy/container/build.sh)" \
	"$stage/root.tar" "$IMAGE" >/dev/null || die "podman import failed"
rm -f "$ARCHIVE"
"${PODMAN[@]}" save --quiet --format oci-archive -o "$ARCHIVE" "$IMAGE" || die "podman save failed"
log "image $IMAGE: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=iec) (uncompressed)"
log "OCI archive: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)) in $((SECONDS - build_start)) s"
