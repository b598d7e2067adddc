#!/bin/bash
# Scenario: the interop suite run from a checkout under /tmp (issue 24, item 7), as a new user who
# cloned there would run it. The guest's /tmp is a fresh tmpfs, so nothing may reach the guest by
# its host path; lib.sh copies the binary into the run's guest-ebof folder (the guest's /ebof) and
# the scripts into the exchange folder. This proves it: a clone of this checkout's HEAD (plus the
# working tree's uncommitted changes to tracked files and its untracked files under tests/interop)
# in a fresh `mktemp -d /tmp/ebof-XXXXXX`, $EBOF_BIN copied to its target/release/ebof, and a
# scenario run from there with EBOF_BIN pointing into it. The guest kernels and root filesystems
# are this checkout's (EBOF_VM_CACHE), nothing is fetched or rebuilt. The clone is removed at the
# end.
#
# Usage (as root; build first: cargo build --release -p ebof):
#   tests/interop/tmp-checkout.sh             linux-smoke in the bookworm guest, then in the trixie
#                                             guest (~1 min in all)
#   tests/interop/tmp-checkout.sh SCENARIO... each SCENARIO once (e.g. linux-control linux-rdma)
# Environment:
#   EBOF_BIN               the binary to copy (default <repo>/target/release/ebof)
#   EBOF_TMP_CHECKOUT_TIMEOUT  bound on each scenario run in seconds (default 1200)
#   anything else (EBOF_INTEROP_STRICT, EBOF_INTEROP_ARTIFACTS, ...) is passed on to the scenarios
# Exit status: 0 passed, 77 skipped (no `ebof serve` and not EBOF_INTEROP_STRICT), else failed.
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

EBOF_BIN=${EBOF_BIN:-$REPO_ROOT/target/release/ebof}
[[ $EBOF_BIN == /* ]] || EBOF_BIN=$PWD/$EBOF_BIN
_need_root
need_ebof tmp-checkout serve

runs=() # "SCENARIO FLAVOUR" (FLAVOUR "-": the scenario's own)
if (($#)); then
	for s in "$@"; do runs+=("${s%.sh} -"); done
else
	runs=("linux-smoke bookworm" "linux-smoke trixie")
fi

TMP_CO='' INNER=''
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $INNER ]] && kill -0 "$INNER" 2>/dev/null; then
		kill -TERM "$INNER" 2>/dev/null # timeout(1), which passes it on to the scenario
		wait "$INNER" 2>/dev/null
	fi
	[[ -n $TMP_CO && $TMP_CO == /tmp/ebof-* ]] && rm -rf "$TMP_CO"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# _git ARGS...: git on this checkout (as root on a tree another user may own: safe.directory)
_git() { git -c safe.directory='*' -C "$REPO_ROOT" "$@"; }

# make_checkout DIR: DIR = this checkout as its working tree is now (a local clone of HEAD, the
# uncommitted changes applied, the untracked files of tests/interop copied); without git, a copy
# of the tree without target/, .vm-cache/ and .git
make_checkout() {
	local dir=$1 head
	if command -v git >/dev/null && head=$(_git rev-parse --verify -q HEAD 2>/dev/null); then
		git -c safe.directory='*' clone --quiet --shared --no-checkout "$REPO_ROOT" "$dir" ||
			die "git clone of $REPO_ROOT into $dir failed"
		git -C "$dir" -c advice.detachedHead=false checkout --quiet --detach "$head" ||
			die "git checkout of $head in $dir failed"
		_git diff --binary HEAD >"$TMP_CO/worktree.diff" || die "git diff HEAD in $REPO_ROOT failed"
		if [[ -s $TMP_CO/worktree.diff ]]; then
			git -C "$dir" apply --whitespace=nowarn "$TMP_CO/worktree.diff" ||
				die "cannot apply the uncommitted changes of $REPO_ROOT to the clone"
		fi
		_git ls-files -z --others --exclude-standard -- tests/interop |
			(cd "$REPO_ROOT" && xargs -0r cp --parents -t "$dir") ||
			die "cannot copy the untracked files of tests/interop"
		log "checkout: $dir (clone of $head$([[ -s $TMP_CO/worktree.diff ]] && echo ", plus uncommitted changes"))"
	else
		mkdir -p "$dir" || die "cannot create $dir"
		tar -C "$REPO_ROOT" --exclude=./target --exclude=./.vm-cache --exclude=./.git -cf - . |
			tar -C "$dir" -xf - || die "cannot copy $REPO_ROOT into $dir"
		log "checkout: $dir (a copy of $REPO_ROOT, not a git checkout)"
	fi
}

t0=$SECONDS
TMP_CO=$(mktemp -d /tmp/ebof-XXXXXX) || die "mktemp -d /tmp/ebof-XXXXXX failed"
CO=$TMP_CO/ebof
make_checkout "$CO"
mkdir -p "$CO/target/release" || die "cannot create $CO/target/release"
cp "$EBOF_BIN" "$CO/target/release/ebof" || die "cannot copy $EBOF_BIN into $CO/target/release"
log "prepared in $((SECONDS - t0)) s; binary $CO/target/release/ebof; guest cache $VM_CACHE"

failed=0 skipped=0 summary=()
for r in "${runs[@]}"; do
	s=${r% *} f=${r#* } label=${r% *}
	[[ $f != - ]] && label+=" ($f guest)"
	[[ -f $CO/tests/interop/$s.sh ]] || die "no scenario $s in $CO/tests/interop"
	env=(EBOF_VM_CACHE="$VM_CACHE" EBOF_BIN="$CO/target/release/ebof")
	[[ $f != - ]] && env+=(EBOF_VM_FLAVOUR="$f")
	[[ -n ${EBOF_INTEROP_ARTIFACTS:-} ]] && env+=(EBOF_INTEROP_ARTIFACTS="$EBOF_INTEROP_ARTIFACTS/tmp-checkout")
	echo
	log "==== tmp-checkout: $label from $CO ===="
	t=$SECONDS
	# from inside the checkout, as a user would; in the background so that a TERM reaches it
	(cd "$CO" && exec env "${env[@]}" timeout -k 30 "${EBOF_TMP_CHECKOUT_TIMEOUT:-1200}" \
		bash "tests/interop/$s.sh") &
	INNER=$!
	wait "$INNER"
	rc=$?
	INNER=''
	case $rc in
	0) word=PASSED ;;
	77) word=SKIPPED skipped=$((skipped + 1)) ;;
	*) word="FAILED (status $rc)" failed=$((failed + 1)) ;;
	esac
	summary+=("$(printf '  %-36s %5ss  %s' "$label" $((SECONDS - t)) "$word")")
done

echo
echo "---- tmp-checkout ($CO) ----"
printf '%s\n' "${summary[@]}"
log "tmp-checkout: $( ((failed == 0)) && echo PASSED || echo "FAILED ($failed of ${#runs[@]})") in $((SECONDS - t0)) s"
((failed == 0)) || exit 1
((skipped < ${#runs[@]})) || exit 77
