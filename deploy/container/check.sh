#!/usr/bin/env bash
# Check the image deploy/container/build.sh made, from its OCI archive: the layout, the
# entrypoint, the binaries the CSI node plugin runs, that the ebof inside is the one built
# (EBOF_BIN), and that `ebof csi --help` runs in it — with `podman run` where this machine can
# run containers, else with chroot into the image's root filesystem (and it says which).
#
# Knobs: EBOF_BIN (default target/release/ebof), EBOF_IMAGE_ARCHIVE (default
# target/container/ebof-VERSION.oci.tar), EBOF_PODMAN_OPTS (extra global podman options).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
log() { printf '[container-check] %s\n' "$*"; }
fail() {
	printf '[container-check] FAILED: %s\n' "$*" >&2
	exit 1
}
((EUID == 0)) || fail "must run as root (chroot, podman's system storage)"

EBOF_BIN=${EBOF_BIN:-$REPO/target/release/ebof}
if [[ -z ${EBOF_IMAGE_ARCHIVE:-} ]]; then
	[[ -x $EBOF_BIN ]] || fail "no ebof binary at $EBOF_BIN (set EBOF_BIN or EBOF_IMAGE_ARCHIVE)"
	EBOF_IMAGE_ARCHIVE=$REPO/target/container/ebof-$("$EBOF_BIN" --version | awk '{ print $2 }').oci.tar
fi
[[ -s $EBOF_IMAGE_ARCHIVE ]] || fail "no image archive $EBOF_IMAGE_ARCHIVE (run deploy/container/build.sh)"
# shellcheck disable=SC2206 # EBOF_PODMAN_OPTS: a space-separated list on purpose
PODMAN=(podman ${EBOF_PODMAN_OPTS:-})

work=$(mktemp -d "${TMPDIR:-/tmp}/ebof-image-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/oci" "$work/root"
tar -xf "$EBOF_IMAGE_ARCHIVE" -C "$work/oci" || fail "$EBOF_IMAGE_ARCHIVE is not a tar archive"

# ---- the OCI layout: index -> manifest -> config + layers (python3: JSON)
python3 - "$work/oci" >"$work/layers" <<'PY' || fail "the OCI layout of $EBOF_IMAGE_ARCHIVE"
import json, os, sys
d = sys.argv[1]
def blob(digest):
    algo, hexd = digest.split(":", 1)
    return os.path.join(d, "blobs", algo, hexd)
def die(msg):
    print(f"[container-check] FAILED: {msg}", file=sys.stderr)
    sys.exit(1)
if json.load(open(os.path.join(d, "oci-layout"))).get("imageLayoutVersion") != "1.0.0":
    die("oci-layout: imageLayoutVersion is not 1.0.0")
index = json.load(open(os.path.join(d, "index.json")))
if len(index.get("manifests", [])) != 1:
    die(f"index.json: {len(index.get('manifests', []))} manifests, expected 1")
desc = index["manifests"][0]
name = desc.get("annotations", {}).get("org.opencontainers.image.ref.name", "")
if not name:
    die("index.json: the manifest has no org.opencontainers.image.ref.name (image name)")
manifest = json.load(open(blob(desc["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
if config.get("os") != "linux" or config.get("architecture") != "amd64":
    die(f"config: os/architecture {config.get('os')}/{config.get('architecture')}, expected linux/amd64")
entry = config.get("config", {}).get("Entrypoint")
if entry != ["/usr/local/bin/ebof"]:
    die(f"config: Entrypoint {entry}, expected ['/usr/local/bin/ebof']")
print(f"NAME {name}")
for layer in manifest["layers"]:
    print(f"LAYER {blob(layer['digest'])}")
PY
IMAGE=$(awk '$1 == "NAME" { print $2 }' "$work/layers")
while read -r kind path; do
	[[ $kind == LAYER ]] || continue
	tar -xf "$path" -C "$work/root" --numeric-owner || fail "cannot unpack layer $path"
done <"$work/layers"
rm -rf "$work/oci"
root=$work/root
log "image $IMAGE (entrypoint /usr/local/bin/ebof, linux/amd64) unpacked from $EBOF_IMAGE_ARCHIVE ($(du -sh "$root" | cut -f1))"

# in_root PATH: PATH resolved inside the image root (symlinks, absolute or relative, stay in it)
in_root() {
	local p=$1 n=0 t
	while ((n++ < 40)); do
		if [[ -L $root$p ]]; then
			t=$(readlink "$root$p")
			[[ $t == /* ]] || t=$(dirname "$p")/$t
			p=$t
		else
			[[ -e $root$p ]] && { echo "$p"; return 0; }
			# a symlinked directory on the way (merged /usr: /sbin -> usr/sbin)
			local dir base
			dir=$(dirname "$p") base=$(basename "$p")
			[[ $dir == / ]] && return 1
			dir=$(in_root "$dir") || return 1
			[[ $dir/$base == "$p" ]] && return 1
			p=$dir/$base
		fi
	done
	return 1
}
# ---- the binaries: ebof, the node plugin's tools, and sh (the node DaemonSet's init container)
missing=()
for b in ebof nvme mkfs.ext4 mkfs.xfs xfs_growfs resize2fs blkid mount umount modprobe sh; do
	found=''
	for d in /usr/local/bin /usr/local/sbin /usr/sbin /usr/bin /sbin /bin; do
		if p=$(in_root "$d/$b") && [[ -f $root$p && -x $root$p ]]; then
			found=$d/$b
			break
		fi
	done
	if [[ -n $found ]]; then
		log "  present: $found"
	else
		missing+=("$b")
	fi
done
((${#missing[@]} == 0)) || fail "missing from the image: ${missing[*]}"
if [[ -x $EBOF_BIN ]]; then
	cmp -s "$EBOF_BIN" "$root/usr/local/bin/ebof" ||
		fail "/usr/local/bin/ebof in the image is not $EBOF_BIN (rebuild: deploy/container/build.sh)"
	log "  /usr/local/bin/ebof is $EBOF_BIN"
fi

# ---- run `ebof csi --help` in the image
apt_ensure() {
	local p missing=()
	for p in "$@"; do
		[[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; }
}
# run_in MODE ARGS...: the image's entrypoint with ARGS, by podman (with $run_opts) or chroot
mode='' run_opts=()
run_in() {
	if [[ $mode == podman ]]; then
		"${PODMAN[@]}" "${run_opts[@]:0:${#global_opts[@]}}" run --rm --pull never --network none \
			"${run_opts[@]:${#global_opts[@]}}" "$IMAGE" "$@"
	else
		chroot "$root" /usr/local/bin/ebof "$@"
	fi
}
# Ways to run a container, tried in order (a machine may refuse one: cgroups v1/hybrid under
# crun, rlimits the sandbox may not raise). Each: "global options | run options".
attempts=(
	" | "
	"--runtime runc | --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
	" | --cgroups disabled --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
	"--runtime runc --storage-driver vfs | --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
)
why=''
if "${PODMAN[@]}" image exists "$IMAGE" 2>/dev/null; then
	command -v runc >/dev/null 2>&1 || apt_ensure runc || true
	for a in "${attempts[@]}"; do
		read -r -a global_opts <<<"${a%%|*}"
		read -r -a rest <<<"${a#*|}"
		run_opts=("${global_opts[@]}" "${rest[@]}")
		mode=podman
		if out=$(run_in --version 2>&1) && [[ $out == ebof\ * ]]; then
			log "podman runs containers here (options: ${run_opts[*]:-none}): $out"
			[[ -z $why ]] || log "  (refused before: $why)"
			break
		fi
		why+="${why:+; }[${run_opts[*]:-default}] $(tail -n 1 <<<"$out")"
		mode=''
	done
else
	why="image $IMAGE is not in podman's storage"
fi
if [[ -z $mode ]]; then
	mode=chroot
	log "podman cannot run containers on this machine ($why)"
	log "running the binary with chroot into the image's root filesystem instead"
fi

set +e
out=$(run_in csi --help 2>&1)
rc=$?
set -e
((rc == 0)) || fail "ebof csi --help in the image ($mode) exited $rc: $out"
grep -q -- '--endpoint' <<<"$out" || fail "ebof csi --help does not mention --endpoint: $out"
log "ebof csi --help ran in the image ($mode)"
# the tools run too (their libraries are in the image)
if [[ $mode == podman ]]; then
	tools_out=$("${PODMAN[@]}" "${run_opts[@]:0:${#global_opts[@]}}" run --rm --pull never --network none \
		"${run_opts[@]:${#global_opts[@]}}" --entrypoint /bin/sh "$IMAGE" -c \
		'nvme version && mkfs.xfs -V && mkfs.ext4 -V 2>&1 | head -n 1 && blkid -V' 2>&1) ||
		fail "the node tools do not run in the image: $tools_out"
else
	tools_out=$(chroot "$root" /bin/sh -c 'nvme version && mkfs.xfs -V && mkfs.ext4 -V 2>&1 | head -n 1 && blkid -V' 2>&1) ||
		fail "the node tools do not run in the image: $tools_out"
fi
log "node tools ($mode): $(tr '\n' ';' <<<"$tools_out")"
log "image OK"
