//! `-t rdma` on the host commands where RDMA cannot work: one clear error, never a panic.
//!
//! This machine's kernel has no RDMA (the guest scenarios in tests/interop run NVMe/RDMA for
//! real); here every host command must fail with a single "RDMA: …" cause — the library or
//! device is missing, or the address has no RDMA device — and TCP-only options are refused.

mod common;

use common::ebof;

const NQN: &str = "nqn.2026-11.io.ebof:default";

#[test]
fn rdma_without_an_rdma_device_is_one_clear_error() {
    for args in [
        vec!["discover", "-t", "rdma", "-a", "127.0.0.1"],
        vec![
            "discover",
            "--transport",
            "rdma",
            "-a",
            "127.0.0.1",
            "-s",
            "4420",
        ],
        vec!["identify", "-t", "rdma", "-a", "127.0.0.1", "-n", NQN],
        vec![
            "perf",
            "-t",
            "rdma",
            "-a",
            "127.0.0.1",
            "-n",
            NQN,
            "--runtime",
            "1s",
            "--verify",
        ],
    ] {
        let o = ebof(&args);
        assert!(!o.ok, "{args:?} succeeded without RDMA");
        assert!(!o.stderr.contains("panicked"), "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.starts_with("ebof: error: "),
            "{args:?}: {}",
            o.stderr
        );
        assert_eq!(
            o.stderr.matches("RDMA: ").count(),
            1,
            "{args:?}: the cause once: {}",
            o.stderr
        );
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: {}", o.stderr);
    }
}

#[test]
fn tcp_only_options_are_refused_with_rdma() {
    let o = ebof(&[
        "perf",
        "-t",
        "rdma",
        "-a",
        "127.0.0.1",
        "-n",
        NQN,
        "--hdr-digest",
    ]);
    assert!(!o.ok);
    assert!(o.stderr.contains("NVMe/TCP only"), "{}", o.stderr);
    let o = ebof(&[
        "identify",
        "-t",
        "rdma",
        "-a",
        "127.0.0.1",
        "-n",
        NQN,
        "--tls",
        "--tls-key",
        // A well-formed configured PSK (nvme-cli's example key).
        "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
    ]);
    assert!(!o.ok);
    assert!(o.stderr.contains("no TLS"), "{}", o.stderr);
    let o = ebof(&["discover", "-t", "roce", "-a", "127.0.0.1"]);
    assert!(!o.ok);
    assert!(o.stderr.contains("tcp or rdma"), "{}", o.stderr);
}
