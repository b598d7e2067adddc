//! # ebof-fuzz — one fuzz target per layer, and a stable driver for them
//!
//! **What it is**: the fuzz targets of ebof as plain functions `fn(&[u8], &mut Features)` that
//! panic on a bug (a panic in the code under test, or a broken invariant asserted here), a
//! generator of their seed inputs ([`seeds`]), and [`driver`]: a time-bounded, seeded mutation
//! loop over the committed corpus (`fuzz/corpus/<target>/`) that runs on stable Rust. The same
//! functions are the libFuzzer entry points of `fuzz/` (`cargo +nightly fuzz run <target>`,
//! coverage-guided, for runs of hours). See `docs/fuzzing.md` and ADR 0007.
//!
//! **What it is not**: no product code. Every target drives the real sans-IO seams (the PDU
//! decoder, `ConnCore`, `ebof-config`, `nvmf-host`'s `QueueCore`, `nvme-auth`'s state machines,
//! the `nvmf-rdma` and `nvmf-tls` decoders), never a copy.
//!
//! **Targets** ([`TARGETS`]):
//! - [`targets::pdu`]: arbitrary bytes into the stateless and both stateful PDU decoders;
//!   decode → encode → decode round trip.
//! - [`targets::target_conn`]: a whole target connection (`ConnCore` over a RAM namespace): a
//!   valid handshake prefix (ICReq, admin Connect, CC.EN; or an I/O queue Connect), then
//!   arbitrary PDUs; the output must decode as well-formed PDUs on the host side and complete
//!   only commands that were sent.
//! - [`targets::config_text`]: arbitrary text into the TOML configuration parser.
//! - [`targets::config_struct`]: arbitrary values in a valid configuration skeleton, plus
//!   arbitrary command-line overrides.
//! - [`targets::host_queue`]: arbitrary controller PDUs into the host queue engine with
//!   reads, writes (in-capsule and R2T) and admin commands outstanding, and the payload
//!   decoders the host applies to what comes back.
//! - [`targets::auth`]: DH-HMAC-CHAP payloads into the AUTH message codec and into a target
//!   and a host state machine that otherwise talk honestly; round trips, no authentication
//!   without the keys, an honest exchange always succeeds.
//! - [`targets::rdma_wire`]: bytes into the NVMe/RDMA CM private data and keyed SGL decoders;
//!   round trips, agreement with `nvme-spec`'s SGL length.
//! - [`targets::tls_psk`]: bytes into the PSK identity parser, the target's identity lookup
//!   and the key interchange format; round trips, host ↔ target agreement on the TLS PSK.
//! - [`targets::tls_record`]: records into an established TLS session (our record layer):
//!   raw ciphertext, hostile inner plaintext under the right key, honest data, KeyUpdates,
//!   tampered records; honest data arrives whole, failures are sticky and answered by alerts.
//! - [`targets::dim`]: bytes into the Discovery Information Management decoder (TP 8010);
//!   offsets of refusals inside the data, stable round trips of what is accepted.
//! - [`targets::dim_registry`]: sequences of DIM register / update / deregister from many
//!   identities (host NQNs, source addresses, authenticated or not, trusted or not) against a
//!   CDC target's registry; its bounds, the CDC's admission and the origin rule hold, and what
//!   the CDC was told to announce matches the registry after every step.
//! - [`targets::csi_names`]: text into the CSI driver's volume-context listener decoder
//!   and the names it derives from CSI names (`ebof_csi::names`).
//! - [`targets::csi_authority`]: a gRPC client's bytes into the CSI socket's `:authority`
//!   rewriter (HTTP/2 frames, HPACK); piece-independent, and its output a fixed point.
//! - [`targets::vendor_cmds`]: an SQE and data into the vendor admin decoders (C1h Mirror
//!   Admit, C5h Witness Lease, C9h Mirror Reservations, CDh Mirror Snapshot); known refusals
//!   only, identity round trips of what is accepted (a reservation table also through its
//!   persisted form).
//! - [`targets::key_header`]: bytes from disk into the encryption-at-rest decoders (the key
//!   header beside an encrypted namespace, a key file's content; ADR 0029).
//! - [`targets::witness_table`]: bytes from disk into the witness's saved lease table (ADR
//!   0028); what is accepted encodes back to its bytes and grants nothing in its grace period.

#![forbid(unsafe_code)]

pub mod driver;
pub mod mutate;
pub mod seeds;
pub mod targets;

/// Outcome features a target reports for an input (which PDU types came back, which status
/// codes, which error reasons...). The stable driver keeps an input that shows a feature never
/// seen before, a cheap stand-in for coverage feedback; libFuzzer ignores them.
#[derive(Debug, Default)]
pub struct Features(Vec<u64>);

impl Features {
    /// Record a feature: `kind` names the family, `value` the instance.
    pub fn add(&mut self, kind: u8, value: u64) {
        self.0.push((u64::from(kind) << 56) ^ value);
    }

    /// Record a feature named by a string (error reasons, ...).
    pub fn add_str(&mut self, kind: u8, s: &str) {
        self.add(kind, fnv1a(s.as_bytes()));
    }

    /// Record the variant of an enum (the leading word of its `Debug` form): an error's kind
    /// without the values it carries.
    pub fn add_variant(&mut self, kind: u8, v: &impl std::fmt::Debug) {
        let d = format!("{v:?}");
        let end = d
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(d.len());
        self.add_str(kind, &d[..end]);
    }

    /// The features recorded, in order, with repetitions.
    pub fn as_slice(&self) -> &[u64] {
        &self.0
    }

    /// Forget the features recorded (before each run).
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// FNV-1a, for feature values and crash file names (stable across runs and platforms).
pub fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A fuzz target: its name (also its corpus directory and its libFuzzer binary), the
/// function, the largest input worth generating, and its share of the time.
pub struct Target {
    /// Name: the corpus directory `fuzz/corpus/<name>/` and the libFuzzer binary.
    pub name: &'static str,
    /// Runs one input, recording its outcome features; panics on a bug.
    pub run: fn(&[u8], &mut Features),
    /// Largest input the driver generates, in bytes (mutations never grow an input past it).
    pub max_len: usize,
    /// In a run of every target, this one mutates for `--secs / time_div`: 1 for the layer
    /// targets; 2 for `auth` and 4 for the two stateless decoders (microseconds an execution),
    /// so that the three of them share the slot the fifth layer target leaves free (two run at
    /// a time) and the run takes no longer. A run that names its targets gives each the whole
    /// `--secs`.
    pub time_div: u32,
}

/// Every target, in the order the driver runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "pdu",
        run: targets::pdu::run,
        max_len: 16 * 1024,
        time_div: 1,
    },
    Target {
        name: "target_conn",
        run: targets::target_conn::run,
        max_len: 64 * 1024,
        time_div: 1,
    },
    Target {
        name: "config_text",
        run: targets::config_text::run,
        max_len: 8 * 1024,
        time_div: 1,
    },
    Target {
        name: "config_struct",
        run: targets::config_struct::run,
        max_len: 4 * 1024,
        time_div: 1,
    },
    Target {
        name: "host_queue",
        run: targets::host_queue::run,
        max_len: 64 * 1024,
        time_div: 1,
    },
    Target {
        name: "auth",
        run: targets::auth::run,
        max_len: 16 * 1024,
        time_div: 2,
    },
    Target {
        name: "rdma_wire",
        run: targets::rdma_wire::run,
        max_len: 4 * 1024 + 1,
        time_div: 4,
    },
    Target {
        name: "tls_psk",
        run: targets::tls_psk::run,
        max_len: 1024,
        time_div: 4,
    },
    Target {
        name: "tls_record",
        run: targets::tls_record::run,
        max_len: 40 * 1024,
        time_div: 4,
    },
    Target {
        name: "dim",
        run: targets::dim::run,
        max_len: 8 * 1024,
        time_div: 4,
    },
    Target {
        name: "dim_registry",
        run: targets::dim_registry::run,
        max_len: 2400,
        time_div: 2,
    },
    Target {
        name: "csi_names",
        run: targets::csi_names::run,
        max_len: 512,
        time_div: 4,
    },
    Target {
        name: "csi_authority",
        run: targets::csi_authority::run,
        max_len: 4096,
        time_div: 4,
    },
    Target {
        name: "vendor_cmds",
        run: targets::vendor_cmds::run,
        max_len: 256,
        time_div: 4,
    },
    Target {
        name: "key_header",
        run: targets::key_header::run,
        max_len: 256,
        time_div: 4,
    },
    Target {
        name: "witness_table",
        run: targets::witness_table::run,
        max_len: 512,
        time_div: 4,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
