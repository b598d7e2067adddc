#!/usr/bin/env bash
# ebof vs SPDK side by side, in both roles: spdk_nvme_perf against `ebof serve` and against
# SPDK's nvmf_tgt (same core), and `ebof perf` against spdk_nvme_perf (same core) against
# nvmf_tgt; tail latency; plus idle CPU and the 1 -> 2 core step. Where SPDK was built with
# --with-uring, nvmf_tgt runs a second time on io_uring sockets as a third target. Prints
# markdown tables: medians with min-max and the best round over interleaved rounds, each
# target's busy share and busy time per I/O (its run loop's own accounting: ebof's
# `ebof_reactor_busy_seconds_total`, SPDK's `framework_get_reactors`), the client's CPU, which
# side was the limit, and three ratios per row (medians, best rounds, per-round pairs). Not a
# test, and not part of the test command.
#
# Needs a built SPDK outside this repository (nothing of SPDK enters it), root (hugepages),
# and a quiet machine:
#   SPDK_DIR=/path/to/spdk ./scripts/bench-vs-spdk.sh
# Knobs (environment): ROUNDS (7), RUNTIME (4 s), WARMUP (1 s), TLS_ROUNDS (5),
# TARGET_CORE (0), CLIENT_CORE (1), EBOF_PORT (14420), SPDK_PORT (14421), RAM_MB (1024),
# ONLY=target|client|tail|idle|scale|tls (one section; tail: p99.9/p99.99 of 4K random reads
# at QD1 and QD32, TAIL_ROUNDS (3) rounds of TAIL_RUNTIME (10) s; tls: plain vs TLS 1.3 PSK,
# ebof perf -> ebof serve and spdk_nvme_perf -> both targets, the cipher's single-core rate,
# and connection set-up time with DH-HMAC-CHAP), SPDK_URING=0 (no io_uring target),
# METRICS_PORT (14490; ebof's /metrics, and the next port for the TLS section's).
# Building SPDK (v26.05 was used): see "Benchmarks against SPDK" in docs/guide/bench.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z ${SPDK_DIR:-} ]]; then
	echo "bench-vs-spdk: set SPDK_DIR to a built SPDK tree (see docs/guide/bench.md)" >&2
	exit 1
fi
exec python3 scripts/bench_vs_spdk.py "$@"
