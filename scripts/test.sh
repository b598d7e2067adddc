#!/usr/bin/env bash
# Run every test: formatting, lints, unit/property/end-to-end tests, then the Linux interop
# suite in a QEMU guest (installs its own packages; set EBOF_SKIP_INTEROP=1 to skip it).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

# rustfmt and clippy come with rustup's default profile; add them where a minimal one was used.
if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
# fio for the `ebof bench --engine fio` test (crates/ebof/tests/bench.rs runs it on a plain
# file; without fio that test says so and skips). Installed only where we may.
if ! command -v fio >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "apt-get install fio"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fio >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fio >/dev/null; } ||
        echo "warning: could not install fio; the fio engine test will be skipped"
fi
# xfsprogs for the reflink snapshot test (crates/ebof/tests/snapshots.rs makes a loop-mounted
# XFS with reflink=1 as root; without mkfs.xfs that test says SKIPPED).
if ! command -v mkfs.xfs >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "apt-get install xfsprogs"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends xfsprogs >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends xfsprogs >/dev/null; } ||
        echo "warning: could not install xfsprogs; the XFS reflink snapshot test will be skipped"
fi
# OpenSSL headers and pkg-config (the TLS crate); the openssl and gnutls command-line tools
# are independent TLS peers for nvmf-tls's interop tests (skipped, saying so, without them).
. scripts/build-deps.sh
ebof_build_deps
if { ! command -v openssl >/dev/null 2>&1 || ! command -v gnutls-cli >/dev/null 2>&1; } &&
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "apt-get install openssl gnutls-bin"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl gnutls-bin >/dev/null ||
        echo "warning: could not install openssl/gnutls-bin; their TLS peer tests will be skipped"
fi
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The house limits of ARCHITECTURE.md ("where does a new feature go"): no production file over
# 1,000 lines and no production function over 150 in the control plane, its clients and the host;
# no module import circle there nor in the data path's runtime and target.
step "house limits (scripts/arch_stats.py --check)"
python3 scripts/arch_stats.py --check ebof ebof-mgmt ebof-api ebof-csi nvmf-host ebof-fleet ebof-mirror
python3 scripts/arch_stats.py --check --circles-only ebof-runtime nvmf-target ebof-perf
step "cargo test"
cargo test --workspace --locked
# Every fuzz target: replay fuzz/corpus/<target>/, then mutate for EBOF_FUZZ_SECS (default 30)
# per target (the three small decoders share one such slot), two at a time (docs/fuzzing.md). Built with the test profile cargo test just used.
step "fuzz (${EBOF_FUZZ_SECS:-30} s per target)"
cargo run --locked --profile test -q -p ebof-fuzz -- run
# The Kubernetes deployment files: strict schema and cross-checks, then 22 broken copies that
# must each be rejected (python3 + PyYAML, installed by the script where missing; ~3 s).
step "deployment manifests (tests/deploy/check_manifests.py)"
python3 tests/deploy/check_manifests.py
# deploy/monitoring/: promtool check/test rules and check metrics, every dashboard query and rule
# evaluated by a real Prometheus scraping `ebof serve` under `ebof perf` (~10 s).
step "monitoring (scripts/check-monitoring.sh)"
scripts/check-monitoring.sh
if [ "${EBOF_SKIP_INTEROP:-0}" != 1 ]; then
    # The guests run the very binary cargo test built and tested (test profile, opt-level 1),
    # with its debug info stripped (260 MB -> ~25 MB). A separate release build took 5-7 min of
    # a fresh machine; the guests' time is the emulated CPU's, not ebof's (EBOF_BIN overrides).
    step "interop binary (cargo test's ebof, debug info stripped)"
    INTEROP_BIN=${EBOF_BIN:-}
    if [ -z "$INTEROP_BIN" ]; then
        mkdir -p target/interop
        objcopy --strip-debug target/debug/ebof target/interop/ebof
        INTEROP_BIN=$PWD/target/interop/ebof
    fi
    # The container image (a Debian bookworm root made with mmdebstrap, cached in .vm-cache:
    # ~1.5 min the first time, ~40 s after) and the systemd unit, both of that binary.
    step "container image (deploy/container/build.sh + check.sh)"
    EBOF_BIN="$INTEROP_BIN" deploy/container/build.sh
    EBOF_BIN="$INTEROP_BIN" deploy/container/check.sh
    step "systemd unit (tests/deploy/check_systemd.sh)"
    EBOF_BIN="$INTEROP_BIN" tests/deploy/check_systemd.sh
    step "Linux interop (QEMU guest)"
    # run-all's default list starts with tmp-checkout: linux-smoke from a clone under /tmp, so the
    # guests must reach the binary wherever the checkout lives (~1 min)
    EBOF_INTEROP_STRICT=1 EBOF_BIN="$INTEROP_BIN" tests/interop/run-all.sh
fi
step "all tests passed"
