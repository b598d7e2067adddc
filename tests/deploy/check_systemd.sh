#!/usr/bin/env bash
# Check deploy/systemd/: the unit passes `systemd-analyze verify` with no warning at all (it
# exits 0 on unknown keys and bad values, so any output fails here), and the example box
# configuration is one `ebof serve` accepts (--print-config) and agrees with the unit: the path
# ExecStart reads, the token and autosave in the writable /etc/ebof, pools outside the
# read-only /usr, /etc, /boot.
#
# The unit names /usr/local/bin/ebof, which need not exist here: verify runs on a copy whose
# ExecStart is $EBOF_BIN (default target/release/ebof). systemd (for systemd-analyze) is apt-installed
# when missing; where it still is not there, that part is skipped
# (and says so); systemd need not be running.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
log() { printf '[systemd-check] %s\n' "$*"; }
fail() {
	printf '[systemd-check] FAILED: %s\n' "$*" >&2
	exit 1
}
UNIT=deploy/systemd/ebof.service
CONF=deploy/systemd/ebof.toml
EBOF_BIN=${EBOF_BIN:-$REPO/target/release/ebof}
[[ -x $EBOF_BIN ]] || fail "no ebof binary at $EBOF_BIN (cargo build --release -p ebof, or set EBOF_BIN)"
work=$(mktemp -d "${TMPDIR:-/tmp}/ebof-systemd-check.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---- the unit
# systemd-analyze comes with Debian's systemd package (installing it starts nothing).
if ! command -v systemd-analyze >/dev/null 2>&1 && ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
	log "apt-get install systemd (for systemd-analyze)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null 2>&1; } ||
		log "apt-get install systemd failed"
fi
if command -v systemd-analyze >/dev/null 2>&1; then
	sed "s#/usr/local/bin/ebof#$EBOF_BIN#g" "$UNIT" >"$work/ebof.service"
	# --man=no: the Documentation= man page is installed with the binary, not here
	if ! out=$(systemd-analyze verify --man=no "$work/ebof.service" 2>&1) || [[ -n $out ]]; then
		fail "systemd-analyze verify $UNIT: ${out:-non-zero exit}"
	fi
	log "systemd-analyze verify $UNIT: no warnings ($(systemd-analyze --version | head -n 1))"
else
	log "SKIPPED: systemd-analyze is not installed here: $UNIT not verified"
fi
key() { sed -n "s/^$1=//p" "$UNIT"; }
exec_start=$(key ExecStart)
[[ $exec_start == "/usr/local/bin/ebof serve --config /etc/ebof/ebof.toml" ]] ||
	fail "$UNIT: ExecStart is '$exec_start', expected /usr/local/bin/ebof serve --config /etc/ebof/ebof.toml"
[[ $(key Restart) == on-failure && $(key LimitMEMLOCK) == infinity ]] ||
	fail "$UNIT: Restart=on-failure and LimitMEMLOCK=infinity expected"
for k in PrivateDevices DevicePolicy DeviceAllow ProtectClock SystemCallFilter; do
	[[ -z $(key "$k") ]] || fail "$UNIT: $k= would hide block devices or io_uring from ebof serve"
done

# ---- the example configuration
if out=$("$EBOF_BIN" serve --config "$CONF" --print-config 2>&1); then
	log "$CONF: accepted by ebof serve --print-config"
else
	fail "$CONF: ebof serve --print-config: $out"
fi
toml() { sed -n "s/^$1[[:space:]]*=[[:space:]]*\"\{0,1\}\([^\"#]*\)\"\{0,1\}.*/\1/p" "$CONF" | sed 's/[[:space:]]*$//'; }
token=$(toml token_file)
[[ $token == /etc/ebof/* ]] || fail "$CONF: token_file '$token' is not in /etc/ebof (ConfigurationDirectory)"
if [[ $(toml autosave) == true ]]; then
	grep -q '^ReadWritePaths=.*/etc/ebof' "$UNIT" || fail "$CONF has autosave = true but $UNIT keeps /etc/ebof read-only"
fi
while read -r dir; do
	case $dir in
	/usr/* | /etc/* | /boot/*) fail "$CONF: pool directory $dir is read-only under ProtectSystem=full" ;;
	esac
done < <(toml directory)
# the example box is the one the Kubernetes example's boxes Secret points at
api=$(toml listen)
grep -Eq "api = \"(https://)?$api\"" deploy/kubernetes/boxes-secret.yaml ||
	fail "$CONF: [management] listen $api is not a box of deploy/kubernetes/boxes-secret.yaml"
log "$CONF agrees with $UNIT and deploy/kubernetes/boxes-secret.yaml"
