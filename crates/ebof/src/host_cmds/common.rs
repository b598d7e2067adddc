//! Shared pieces of the host subcommands: address resolution, host configuration, the runtime,
//! and the size/duration/range parsers (`4k`, `128k`, `1M`, `1G`; `10s`, `500ms`, `2m`).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nvmf_host::HostConfig;

/// Resolve `traddr` (IPv4, IPv6 with or without brackets, or a host name) and `port`.
pub fn resolve(traddr: &str, port: u16) -> Result<SocketAddr> {
    let host = traddr.trim_start_matches('[').trim_end_matches(']');
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {traddr}"))?
        .next()
        .with_context(|| format!("{traddr} has no address"))
}

/// The host configuration: the system identity (nvme-cli's files) unless `--hostnqn` is given.
pub fn host_config(hostnqn: Option<&str>) -> Result<HostConfig> {
    let mut cfg = HostConfig::default();
    if let Some(n) = hostnqn {
        if !nvme_spec::is_valid_nqn(n) {
            bail!("--hostnqn {n:?} is not a valid NQN (nqn.…, at most 223 printable characters)");
        }
        cfg.hostnqn = n.to_string();
    }
    Ok(cfg)
}

/// Who the host says it is, as nvme-cli spells it: `-q/--hostnqn`, `-I/--hostid`.
#[derive(clap::Args, Debug, Default)]
pub struct HostIdArgs {
    /// Host NQN (default: /etc/nvme/hostnqn, else a generated UUID NQN).
    #[arg(short = 'q', long, value_name = "NQN")]
    pub hostnqn: Option<String>,
    /// Host Identifier, a UUID (default: /etc/nvme/hostid, else the UUID in the host NQN).
    #[arg(short = 'I', long, value_name = "UUID")]
    pub hostid: Option<String>,
}

impl HostIdArgs {
    /// The host configuration with this identity ([`host_config`], then the host ID).
    pub fn config(&self) -> Result<HostConfig> {
        let mut cfg = host_config(self.hostnqn.as_deref())?;
        if let Some(id) = &self.hostid {
            let Some(bytes) = parse_uuid(id) else {
                bail!("--hostid {id:?} is not a UUID (e.g. 3d1219c7-c4c5-404a-aa1f-6d2a48adfda4)");
            };
            cfg.hostid = bytes;
        }
        Ok(cfg)
    }
}

/// A UUID in its text form (hyphenated or 32 hex digits), as `/etc/nvme/hostid` is read
/// (`nvmf_host::HostIdentity::system`).
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    uuid::Uuid::parse_str(s.trim()).ok().map(|u| *u.as_bytes())
}

/// Whether JSON is asked for, by `--json` or `-o json`.
pub fn wants_json(json: bool, format: Option<OutputFormat>) -> bool {
    json || format == Some(OutputFormat::Json)
}

/// nvme-cli's `-o/--output-format`: `normal` or `json` (ebof's `--json` says the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Text.
    #[default]
    Normal,
    /// JSON.
    Json,
}

/// A current-thread tokio runtime with I/O and timers.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// Parse a size: a whole number with an optional binary suffix k/m/g/t (KiB/MiB/GiB/TiB; `b`,
/// `ib` and `ib`+`b` spellings accepted, case-insensitive): `512`, `4k`, `128K`, `1M`, `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?} (e.g. 4k, 128k, 1M, 1G)"))?;
    let shift = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(format!("bad size unit in {s:?} (k, m, g, t)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {s:?} too large"))
}

/// Parse a duration: a whole number with unit `us`, `ms`, `s`, `m`, `h` (no unit = seconds):
/// `10s`, `500ms`, `2m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?} (e.g. 10s, 500ms, 2m)"))?;
    Ok(match unit {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "" | "s" => Duration::from_secs(n),
        "m" | "min" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("bad duration unit in {s:?} (us, ms, s, m, h)")),
    })
}

/// Parse a byte range `START-END` (`0-1G`, `1M-64M`) or `LEN` (= `0-LEN`). END is exclusive.
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (parse_size(a)?, parse_size(b)?),
        None => (0, parse_size(s)?),
    };
    if b <= a {
        return Err(format!("empty range {s:?}"));
    }
    Ok((a, b))
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// A UUID in its 8-4-4-4-12 form.
pub fn uuid_str(b: &[u8; 16]) -> String {
    let h = hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("64MB"), Ok(64 << 20));
        assert!(parse_size("4x").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("0-1G"), Ok((0, 1 << 30)));
        assert_eq!(parse_range("1M-2M"), Ok((1 << 20, 2 << 20)));
        assert_eq!(parse_range("64M"), Ok((0, 64 << 20)));
        assert!(parse_range("2M-1M").is_err());
    }

    #[test]
    fn uuids() {
        let want = [
            0x3d, 0x12, 0x19, 0xc7, 0xc4, 0xc5, 0x40, 0x4a, 0xaa, 0x1f, 0x6d, 0x2a, 0x48, 0xad,
            0xfd, 0xa4,
        ];
        assert_eq!(
            parse_uuid("3d1219c7-c4c5-404a-aa1f-6d2a48adfda4"),
            Some(want)
        );
        assert_eq!(parse_uuid("3D1219C7C4C5404AAA1F6D2A48ADFDA4"), Some(want));
        for bad in [
            "",
            "3d1219c7-c4c5-404a-aa1f-6d2a48adfda",
            "3d1219c7xc4c5-404a-aa1f-6d2a48adfda4",
            "3d1219c7-c4c5-404a-aa1f-6d2a48adfdag",
            "ééééééééééééééééé",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(hex(&[0xab, 0x01]), "ab01");
        assert_eq!(
            uuid_str(&[0x11; 16]),
            "11111111-1111-1111-1111-111111111111"
        );
        assert!(resolve("127.0.0.1", 4420).is_ok());
        assert_eq!(resolve("[::1]", 4420).unwrap().port(), 4420);
    }
}

/// How the host proves who it is, as nvme-cli spells it (`discover`, `identify`, `perf`).
#[derive(clap::Args, Debug, Default)]
pub struct SecurityArgs {
    /// DH-HMAC-CHAP: the host's secret (`DHHC-1:NN:…:`, e.g. from `nvme gen-dhchap-key`), used
    /// when the controller asks for authentication.
    #[arg(short = 'S', long, value_name = "SECRET")]
    pub dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP: the controller's secret, for bidirectional authentication (the controller
    /// must prove it knows it too).
    #[arg(short = 'C', long, value_name = "SECRET", requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<String>,
    /// NVMe/TCP over TLS 1.3 with a pre-shared key (needs --tls-key: ebof has no kernel
    /// keyring to look one up in).
    #[arg(long)]
    pub tls: bool,
    /// The configured TLS PSK (`NVMeTLSkey-1:01:…:`, e.g. from `nvme gen-tls-key`); the
    /// retained PSK and TLS PSK are derived from it per host and subsystem, as nvme-cli does.
    #[arg(long, value_name = "KEY", requires = "tls")]
    pub tls_key: Option<String>,
    /// The PSK identity to offer (default: `NVMe0R0H <hostnqn> <subnqn>`, what the Linux host
    /// sends).
    #[arg(long, value_name = "IDENTITY", requires = "tls_key")]
    pub tls_key_identity: Option<String>,
    /// How the TLS PSK is derived from --tls-key for a version-0 identity: `compat` (nvme-cli
    /// <= 2.15, what Linux targets configured with it expect) or `rfc8446` (SPDK's target,
    /// libnvme >= 1.16).
    #[arg(long, value_name = "ENCODING", value_parser = ["compat", "rfc8446"], default_value = "compat", requires = "tls_key")]
    pub tls_psk_derivation: String,
}

impl SecurityArgs {
    /// Put the secrets into `cfg` (a malformed one is an error that does not echo it).
    pub fn apply(&self, cfg: &mut HostConfig) -> Result<()> {
        if let Some(h) = &self.dhchap_secret {
            let keys = nvmf_host::DhchapKeys::parse(h, self.dhchap_ctrl_secret.as_deref())
                .map_err(|e| anyhow::anyhow!("--dhchap-secret / --dhchap-ctrl-secret: {e}"))?;
            cfg.dhchap = Some(keys);
        }
        if self.tls {
            let Some(k) = &self.tls_key else {
                bail!(
                    "--tls needs --tls-key NVMeTLSkey-1:…: (ebof does not read the kernel keyring)"
                );
            };
            let mut key = nvmf_host::TlsKey::parse(k, self.tls_key_identity.as_deref())
                .map_err(|e| anyhow::anyhow!("--tls-key: {e}"))?;
            if self.tls_psk_derivation == "rfc8446" {
                key.derivation = nvmf_tls::psk::Derivation::Rfc8446;
            }
            cfg.tls = Some(key);
        }
        Ok(())
    }
}

/// Where a subsystem is: `-a ADDR [-s PORT] -n SUBNQN` (shared by `identify` and `perf`).
#[derive(clap::Args, Debug)]
pub struct SubsystemArgs {
    /// Target address (IP or host name).
    #[arg(short = 'a', long = "traddr", value_name = "ADDR")]
    pub traddr: String,
    /// Target port.
    #[arg(
        short = 's',
        long = "trsvcid",
        value_name = "PORT",
        default_value_t = 4420
    )]
    pub trsvcid: u16,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn", value_name = "SUBNQN")]
    pub nqn: String,
    /// Transport: `tcp` (NVMe/TCP) or `rdma` (NVMe/RDMA over RoCE, iWARP or InfiniBand).
    #[arg(
        short = 't',
        long = "transport",
        value_name = "TRTYPE",
        default_value = "tcp"
    )]
    pub transport: nvmf_host::Transport,
}

/// Put the transport into `cfg` (after the security and digest options are in it): NVMe/RDMA
/// has neither TLS nor digests, so asking for them with `-t rdma` is an error, said up front.
/// DH-HMAC-CHAP is a pair of admin commands and works on both.
pub fn apply_transport(t: nvmf_host::Transport, cfg: &mut HostConfig) -> Result<()> {
    if t == nvmf_host::Transport::Rdma {
        if cfg.tls.is_some() {
            bail!("--tls is NVMe/TCP only (TLS 1.3 on the TCP stream); NVMe/RDMA has no TLS");
        }
        if cfg.hdr_digest || cfg.data_digest {
            bail!("--hdr-digest / --data-digest are NVMe/TCP only; NVMe/RDMA has no digests");
        }
    }
    cfg.transport = t;
    Ok(())
}
