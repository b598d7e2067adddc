#!/bin/bash
# Scenario: the CSI driver's node side on a real Linux host (issue 22, "Node side in the Linux
# guest"). The guest runs `ebof csi --controller --node` (one process, both services) against a pool
# box on the host side, and drives it with a CSI client of our own (tests/interop/csi_client.py:
# Python gRPC over the driver's Unix socket, messages generated from crates/ebof-csi/proto/csi.proto
# with protoc, stubs from the proto's service descriptors). The node side uses the guest kernel's
# NVMe/TCP initiator (nvme-cli), mkfs, mount and resize2fs / xfs_growfs, as on a Kubernetes node.
#
# Host side (this script, inside a fresh network namespace): one pool box, `ebof serve --config`
# with no subsystem, a pool `default` (a directory in the run dir, 1 GiB cap), NVMe/TCP on
# 10.77.0.1:4420 and :4421 (two paths: the node connects both, native multipath), its management API on TCP at 10.77.0.1:9651 with a bearer token (the guest's
# boxes file names it) and on a Unix socket for the host's own checks, autosave on.
# Guest side (bookworm guest: the host's own userland, so python3-grpcio and the file system tools
# installed here are there): linux-csi.guest.sh. Its 6.1 kernel has no DH-HMAC-CHAP host support
# (CONFIG_NVME_AUTH is not set), so the volumes use auth none, and a volume of the default auth
# (dhchap) must be refused at NodeStage with the reason. With EBOF_CSI_AUTH=dhchap (a guest kernel
# that has it) the host side also plays a machine that presents the published node's NQN without
# its secret (host_on_impostor): it must be refused. At the end the host checks that the box holds no
# `nqn.2026-11.io.ebof:csi:` subsystem and its pool hands out nothing.
# Replicated volumes (issue 34): two more pool boxes R1 10.77.0.31 and R2 10.77.0.32 (API on
# :9651, disjoint CNTLID ranges, `[mirror] witness`) and a witness W 10.77.0.33; at the end the
# guest restarts the driver with their boxes file, makes a `replicas: "2"` block volume, writes,
# has the host kill -9 the primary's box (guest_request csirep), writes and verifies through the
# other copy, and sees ControllerGetVolume say abnormal.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/linux-csi.sh
# Environment:
#   EBOF_BIN               the binary (default <repo>/target/release/ebof)
#   EBOF_INTEROP_TIMEOUT   bound on the guest run in seconds (default 420)
#   EBOF_CSI_XFS=0         leave out the XFS volume (mkfs.xfs wants >= 300 MB)
#   EBOF_CSI_AUTH_GUEST=0  leave out linux-csi-auth.sh (run after this scenario's guest: DH-HMAC-CHAP
#                          volumes on the trixie guest, ~30 s)
#   EBOF_CSI_AUTH          the volumes' StorageClass auth (default none: bookworm's 6.1 kernel has no
#                          DH-HMAC-CHAP host support; a dhchap volume is shown refused with the reason;
#                          linux-csi-auth.sh runs dhchap in the trixie guest)
#   EBOF_CSI_REPLICAS=0    leave out the replicated volume (boxes R1, R2, W and its steps)
#   RUST_LOG               passed to `ebof serve` and `ebof csi` (default info)
# Exit status: 0 passed, 77 skipped (no `ebof serve`/`ctl`/`csi` yet and not EBOF_INTEROP_STRICT),
# else failed.
# shellcheck disable=SC2317 # start_box and host_on_* are called indirectly
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
TARGET_PORT=4420
TARGET_PORT2=4421 # a second listener: the node connects to every one (native multipath)
API_PORT=9651
CSI_PREFIX=nqn.2026-11.io.ebof:csi:
PROTO=$REPO_ROOT/crates/ebof-csi/proto/csi.proto
export RUST_LOG=${RUST_LOG:-info}
# The CSI client (python3-grpcio, python3-protobuf; protoc and the well-known types' .proto files
# from protobuf-compiler and libprotobuf-dev) and the node's tools (mkfs.ext4/resize2fs, mkfs.xfs/
# xfs_growfs, blkid/mount from util-linux): the bookworm guest runs the host's userland.
CSI_PACKAGES=(python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev e2fsprogs xfsprogs
	util-linux jq)

need_ebof linux-csi serve ctl csi

write_config() {
	mkdir -p "$RUN_DIR/pool"
	(umask 077 && head -c 32 /dev/urandom | base64 >"$RUN_DIR/token")
	make_api_cert "$RUN_DIR" "$HOST_IP" || return 1
	cat >"$RUN_DIR/ebof.toml" <<EOF
# written by tests/interop/linux-csi.sh: a pool box with no subsystem
[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT

[[listeners]]
address = "$HOST_IP"
port = $TARGET_PORT2

[management]
listen = "$HOST_IP:$API_PORT"
token_file = "$RUN_DIR/token"
tls_cert = "$RUN_DIR/api-cert.pem"
tls_key = "$RUN_DIR/api-key.pem"
autosave = true

[[pools]]
name = "default"
directory = "$RUN_DIR/pool"
size = "1G"
EOF
	cat "$RUN_DIR/ebof.toml"
	# what the guest's controller needs: the boxes file and the token (owner-only, as on a box)
	install -m 0600 "$RUN_DIR/token" "$X/token"
	install -m 0644 "$RUN_DIR/ca.pem" "$X/ca.pem"
	cat >"$X/boxes.toml" <<EOF
[[boxes]]
name = "box1"
api = "https://$HOST_IP:$API_PORT"
ca_file = "/xchg/ca.pem"
token_file = "/xchg/token"
EOF
}

# Replicated volumes (issue 34): two more pool boxes R1, R2 (disjoint CNTLID ranges, a state
# directory, `[mirror] witness`) and a witness box W, on addresses of their own in the netns;
# the guest's driver is started again with $X/boxes-rep.toml (R1, R2, witness W) for the
# `replicas: "2"` steps. guest_request csirep "kill-primary NQN" kills the volume's primary
# copy's box (kill -9, by PID) and writes its name to /xchg/rep-killed.
declare -A REP_IP=([R1]=10.77.0.31 [R2]=10.77.0.32 [W]=10.77.0.33)
rep_config() {
	local b=$1 lo hi
	if [[ $b == W ]]; then
		printf '[[listeners]]\naddress = "%s"\nport = 4420\n\n[witness]\nlease_max_ms = 4000\n' "${REP_IP[W]}"
		return 0
	fi
	if [[ $b == R1 ]]; then lo=1 hi=999; else lo=1000 hi=1999; fi
	mkdir -p "$RUN_DIR/rep-$b/pool" "$RUN_DIR/rep-$b/state"
	make_api_cert "$RUN_DIR/rep-$b" "${REP_IP[$b]}" || return 1
	cat <<EOF
# written by tests/interop/linux-csi.sh: replica pool box $b
[[listeners]]
address = "${REP_IP[$b]}"
port = 4420

[target]
cntlid_min = $lo
cntlid_max = $hi
state_dir = "$RUN_DIR/rep-$b/state"

[mirror]
witness = "${REP_IP[W]}:4420"
lease_ms = 2000

[management]
listen = "${REP_IP[$b]}:$API_PORT"
token_file = "$RUN_DIR/token"
tls_cert = "$RUN_DIR/rep-$b/api-cert.pem"
tls_key = "$RUN_DIR/rep-$b/api-key.pem"

[[pools]]
name = "default"
directory = "$RUN_DIR/rep-$b/pool"
size = "256M"
EOF
}
rep_start() {
	local b i sock
	for b in W R1 R2; do
		mkdir -p "$RUN_DIR/rep-$b"
		rep_config "$b" >"$RUN_DIR/rep-$b.toml" || return 1
		ip -n "$NS" addr add "${REP_IP[$b]}/24" dev tap0 || return 1
	done
	for b in W R1 R2; do
		sock=$RUN_DIR/rep-$b.sock
		bg_start "rep-$b" ip netns exec "$NS" "$EBOF_BIN" serve --config "$RUN_DIR/rep-$b.toml" \
			--mgmt-socket "$sock" --poll-us 0
		for ((i = 0; i < 150; i++)); do
			bg_alive "rep-$b" || { bg_log_tail "rep-$b" 20; warn "rep-$b exited"; return 1; }
			[[ -S $sock && -n $(ns_exec ss -Hltn "src ${REP_IP[$b]}:4420") ]] && break
			sleep 0.2
		done
		((i < 150)) || { warn "rep-$b does not listen"; return 1; }
		log "rep-$b: ebof serve on ${REP_IP[$b]} (pid $(bg_pid "rep-$b"))"
	done
	install -m 0644 "$RUN_DIR/rep-R1/ca.pem" "$X/ca-r1.pem"
	install -m 0644 "$RUN_DIR/rep-R2/ca.pem" "$X/ca-r2.pem"
	cat >"$X/boxes-rep.toml" <<EOF
witness = "${REP_IP[W]}:4420"

[[boxes]]
name = "r1"
api = "https://${REP_IP[R1]}:$API_PORT"
ca_file = "/xchg/ca-r1.pem"
token_file = "/xchg/token"

[[boxes]]
name = "r2"
api = "https://${REP_IP[R2]}:$API_PORT"
ca_file = "/xchg/ca-r2.pem"
token_file = "/xchg/token"
EOF
}
host_on_csirep() {
	local action nqn b pid out
	read -r action nqn <<<"$1"
	[[ $action == kill-primary ]] || { warn "csirep: unknown action '$action'"; return 2; }
	for b in R1 R2; do
		out=$("$EBOF_BIN" ctl --socket "$RUN_DIR/rep-$b.sock" --json ns mirror status "$nqn" 1 2>&1) || continue
		[[ $(jq -r .role <<<"$out") == primary ]] || continue
		pid=$(bg_pid "rep-$b")
		log "csirep: kill -9 the primary rep-$b (pid $pid) of $nqn"
		kill -KILL "$pid" && wait "$pid" 2>/dev/null
		unset "BG_PIDS[rep-$b]"
		echo "$b" >"$X/rep-killed"
		return 0
	done
	warn "csirep: no primary of $nqn on R1 or R2"
	return 1
}

# the Python messages for the guest's client, from the driver's own csi.proto
gen_client() {
	[[ -f $PROTO ]] || { warn "no $PROTO"; return 1; }
	protoc -I "$(dirname "$PROTO")" -I /usr/include --python_out="$X" "$PROTO" || return 1
	cp "$INTEROP_DIR/csi_client.py" "$X/csi_client.py"
	PYTHONPATH=$X /usr/bin/python3 -c 'import csi_client, csi_pb2; print("csi_pb2: services", sorted(csi_pb2.DESCRIPTOR.services_by_name))' ||
		{ warn "the generated CSI client does not import"; return 1; }
}

# The guest's client with the newest grpcio and protobuf from PyPI (grpc-core >= 1.57 sends the
# socket path as :authority: issue 35), when PyPI answers: the packages of the venv cargo test's
# csi_grpcio uses (made here when missing) copied to $X/pypi, with a csi_pb2.py from grpc_tools'
# protoc. The bookworm guest runs the host's python3, so the compiled grpc module loads there.
# Without PyPI the guest uses Debian's python3-grpcio only, and says so.
PYPI_VENV=$REPO_ROOT/target/grpcio-venv
gen_pypi_client() {
	local py=$PYPI_VENV/bin/python site
	[[ -x $py ]] || python3 -m venv "$PYPI_VENV" || return 1
	"$py" -m pip install --quiet --disable-pip-version-check --upgrade grpcio protobuf grpcio-tools ||
		"$py" -c 'import grpc, grpc_tools' || return 1
	site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
	rm -rf "$X/pypi" && mkdir -p "$X/pypi" || return 1
	cp -a "$site/grpc" "$site/google" "$X/pypi/" || return 1
	[[ ! -f $site/typing_extensions.py ]] || cp -a "$site/typing_extensions.py" "$X/pypi/"
	"$py" -m grpc_tools.protoc -I "$(dirname "$PROTO")" --python_out="$X/pypi" "$PROTO" || return 1
	PYTHONPATH=$X/pypi CSI_PB_DIR=$X/pypi /usr/bin/python3 -c \
		'import grpc, google.protobuf, csi_pb2; print("PyPI client: grpcio", grpc.__version__, "protobuf", google.protobuf.__version__)'
}

start_box() { serve_with_mgmt "$RUN_DIR/ebof.toml" "$TARGET_PORT" "$TARGET_PORT2" "$API_PORT"; }

# host_on_ctl (lib.sh) answers the guest's `ebof ctl` requests through the box's socket

# guest_request impostor "VOL NODE_NQN": this side, another machine on the storage network,
# presents the published node's NQN without its DH-HMAC-CHAP secret (ebof identify, the userspace
# initiator); 0 when the box refuses it for want of authentication, 1 when it gets in
host_on_impostor() {
	local vol node out rc
	read -r vol node <<<"$1"
	out=$(timeout -k 5 30 "$EBOF_BIN" identify -a "$HOST_IP" -s "$TARGET_PORT" -n "$vol" --hostnqn "$node" 2>&1)
	rc=$?
	echo "$out" | tail -n 3
	((rc != 0)) || { warn "connected to $vol as $node without a secret"; return 1; }
	[[ $out == *DH-HMAC-CHAP* ]] || { warn "refused, but not for authentication: $out"; return 1; }
	echo "refused as it must be: $node without its secret on $vol"
}

# after the guest: nothing of the driver's left on the box (no csi subsystem, no pool file, the
# pool allocates nothing)
box_is_clean() {
	local out left files
	out=$("$EBOF_BIN" ctl --socket "$MGMT_SOCK" --json show) || return 1
	left=$(jq -r --arg p "$CSI_PREFIX" '[.subsystems[]?.nqn | select(startswith($p))] | join(" ")' <<<"$out")
	jq -c '.pools // empty' <<<"$out"
	[[ -z $left ]] || { warn "subsystems left on the box: $left"; return 1; }
	files=$(find "$RUN_DIR/pool" -type f -printf '%P ')
	[[ -z $files ]] || { warn "namespace files left in the pool: $files"; return 1; }
	echo "the box holds no $CSI_PREFIX subsystem and its pool directory no namespace file"
}

# ---------------------------------------------------------------------------------------------

interop_init linux-csi
_apt_ensure "${CSI_PACKAGES[@]}"
vm_setup
vm_env "TARGET_PORTS=$TARGET_PORT $TARGET_PORT2" "TARGET_IP=$HOST_IP" "API_PORT=$API_PORT" "CSI_PREFIX=$CSI_PREFIX" \
	"CSI_AUTH=${EBOF_CSI_AUTH:-none}" \
	"CSI_XFS=${EBOF_CSI_XFS:-1}" "RUST_LOG=$RUST_LOG"

write_config
host_step "CSI client: csi_pb2.py from csi.proto (protoc)" gen_client || die "cannot make the CSI client"
host_step "CSI client with the newest grpcio from PyPI" gen_pypi_client ||
	{ warn "no PyPI grpcio: the guest uses Debian's python3-grpcio only"; rm -rf "$X/pypi"; }
host_step "start the pool box (ebof serve, API on $HOST_IP:$API_PORT)" start_box || die "the box did not start"
host_step "ebof ctl --api https://$HOST_IP:$API_PORT (token) show" "$EBOF_BIN" ctl \
	--api "https://$HOST_IP:$API_PORT" --ca-file "$RUN_DIR/ca.pem" --token-file "$RUN_DIR/token" show ||
	{ bg_log_tail target; die "the box's TCP management API does not answer"; }

REP=0 rep_rc=0
if [[ ${EBOF_CSI_REPLICAS:-1} != 0 ]]; then
	if host_step "replicated volumes: boxes R1, R2 and witness W" rep_start; then REP=1; else rep_rc=1; fi
fi
vm_env "REP=$REP" "REP_IPS=${REP_IP[R1]} ${REP_IP[R2]}"
vm_run "$INTEROP_DIR/linux-csi.guest.sh" "${EBOF_INTEROP_TIMEOUT:-420}"
rc=$?
((rc == 0)) && rc=$rep_rc
host_step "the box holds nothing of the driver's" box_is_clean || { ((rc == 0)) && rc=1; }
serve_check_after "$rc" || rc=$?
if ((rc != 0)) && [[ -s $X/csi.log ]]; then
	echo "---- ebof csi log (guest, last 60 lines) ----"
	tail -n 60 "$X/csi.log"
fi
echo
timing_summary
host_summary
# DH-HMAC-CHAP needs a node kernel that has it: the trixie guest, in a scenario of its own (its own
# netns and run dir), run from here so that the suite runs it with this one
if [[ ${EBOF_CSI_AUTH_GUEST:-1} != 0 ]]; then
	log "linux-csi: then linux-csi-auth.sh (a dhchap volume on the trixie guest's 6.12 node)"
	EBOF_BIN=$EBOF_BIN "$INTEROP_DIR/linux-csi-auth.sh"
	arc=$?
	((arc == 0 || arc == 77)) || { ((rc == 0)) && rc=$arc; }
fi
log "linux-csi: $( ((rc == 0)) && echo PASSED || echo "FAILED (status $rc)")"
exit "$rc"
