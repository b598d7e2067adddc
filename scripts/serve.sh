#!/usr/bin/env bash
# Build ebof (release) and run `ebof serve` on its embedded default: subsystem
# nqn.2026-11.io.ebof:default, one 1 GiB RAM namespace, listener 127.0.0.1:4420, discovery
# listener 127.0.0.1:8009.
# Extra arguments go to `ebof serve` (e.g. --config FILE, --listen ADDR:PORT, --ram 4G).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
. scripts/build-deps.sh
ebof_build_deps
cargo build --release --locked -p ebof
exec target/release/ebof serve "$@"
