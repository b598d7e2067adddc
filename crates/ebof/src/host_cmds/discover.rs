//! `ebof discover`: print a discovery log the way `nvme discover` does.

use anyhow::{Context, Result};
use ebof_config::{DEFAULT_DISCOVERY_PORT, DEFAULT_PORT};
use nvme_spec::discovery::{DiscoveryLogEntry, adrfam, eflags, subtype, tcp_sectype, treq, trtype};
use nvmf_host::{DiscoveryLog, HostConfig, HostError};
use serde_json::json;

use super::common::{apply_transport, resolve, runtime};

#[derive(clap::Args, Debug)]
pub struct DiscoverArgs {
    /// Discovery controller address (IP or host name).
    #[arg(short = 'a', long = "traddr", value_name = "ADDR")]
    pub traddr: String,
    /// Discovery controller port [default: 8009; when nothing listens there, 4420, the NVMe
    /// port, where targets answer discovery too].
    #[arg(short = 's', long = "trsvcid", value_name = "PORT")]
    pub trsvcid: Option<u16>,
    #[command(flatten)]
    pub host: super::common::HostIdArgs,
    /// Transport: `tcp` (NVMe/TCP) or `rdma` (NVMe/RDMA over RoCE, iWARP or InfiniBand).
    #[arg(
        short = 't',
        long = "transport",
        value_name = "TRTYPE",
        default_value = "tcp"
    )]
    pub transport: nvmf_host::Transport,
    #[command(flatten)]
    pub security: super::common::SecurityArgs,
    /// Print JSON (nvme-cli's `-o json` shape: genctr and records).
    #[arg(long)]
    pub json: bool,
    /// Output format, as nvme-cli's `-o`: `normal` or `json` (the same as `--json`).
    #[arg(short = 'o', long = "output-format", value_name = "FMT", value_enum)]
    pub output_format: Option<super::common::OutputFormat>,
}

pub fn discover(a: DiscoverArgs) -> Result<()> {
    let mut cfg = a.host.config()?;
    a.security.apply(&mut cfg)?;
    apply_transport(a.transport, &mut cfg)?;
    let rt = runtime()?;
    let port = a.trsvcid.unwrap_or(DEFAULT_DISCOVERY_PORT);
    let addr = resolve(&a.traddr, port)?;
    let log = match rt.block_on(nvmf_host::discover(addr, &cfg)) {
        // Without -s, do what an nvme-cli user expects of a target that serves discovery only
        // on its NVMe port: try 4420 too, and say so.
        Err(e) if a.trsvcid.is_none() && is_refused(&e) => {
            let fallback = resolve(&a.traddr, DEFAULT_PORT)?;
            eprintln!(
                "ebof discover: nothing listens on {addr} (the discovery port); \
                 trying the NVMe port {fallback}"
            );
            discover_at(&rt, fallback, &cfg)?
        }
        r => r.with_context(|| format!("discovery at {addr} failed"))?,
    };
    if super::common::wants_json(a.json, a.output_format) {
        println!("{}", serde_json::to_string_pretty(&to_json(&log))?);
    } else {
        print!("{}", to_text(&log));
    }
    Ok(())
}

fn discover_at(
    rt: &tokio::runtime::Runtime,
    addr: std::net::SocketAddr,
    cfg: &HostConfig,
) -> Result<DiscoveryLog> {
    rt.block_on(nvmf_host::discover(addr, cfg))
        .with_context(|| format!("discovery at {addr} failed"))
}

/// The TCP connection was refused: nothing listens on that port.
fn is_refused(e: &HostError) -> bool {
    matches!(e, HostError::Transport(io) if io.kind() == std::io::ErrorKind::ConnectionRefused)
}

fn trtype_str(t: u8) -> &'static str {
    match t {
        trtype::RDMA => "rdma",
        trtype::FC => "fc",
        trtype::TCP => "tcp",
        trtype::LOOP => "loop",
        _ => "unrecognized",
    }
}

fn adrfam_str(a: u8) -> &'static str {
    match a {
        adrfam::IPV4 => "ipv4",
        adrfam::IPV6 => "ipv6",
        adrfam::IB => "infiniband",
        adrfam::FC => "fibre-channel",
        adrfam::PCI => "pci",
        adrfam::LOOP => "loop",
        _ => "unrecognized",
    }
}

fn subtype_str(s: u8) -> &'static str {
    match s {
        subtype::REFERRAL => "discovery subsystem referral",
        subtype::NVME => "nvme subsystem",
        subtype::CURRENT_DISCOVERY => "current discovery subsystem",
        _ => "unrecognized",
    }
}

fn treq_str(t: u8) -> String {
    let base = match t & treq::SECURE_CHANNEL_MASK {
        treq::NOT_SPECIFIED => "not specified",
        treq::REQUIRED => "required",
        treq::NOT_REQUIRED => "not required",
        _ => "reserved",
    };
    if t & treq::DISABLE_SQFLOW != 0 {
        format!("{base}, sq flow control disable supported")
    } else {
        base.to_string()
    }
}

fn eflags_str(f: u16) -> String {
    let names = [
        (eflags::EPCSD, "explicit discovery connections"),
        (eflags::DUPRETINFO, "duplicate discovery information"),
        (eflags::NCC, "no cdc connectivity"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "none".to_string()
    } else {
        set.join(", ")
    }
}

fn sectype_str(e: &DiscoveryLogEntry) -> &'static str {
    if e.trtype != trtype::TCP {
        return "none";
    }
    match e.tcp_sectype {
        tcp_sectype::NONE => "none",
        tcp_sectype::TLS12 => "tls1.2",
        tcp_sectype::TLS13 => "tls1.3",
        _ => "reserved",
    }
}

/// The `nvme discover` text.
pub fn to_text(log: &DiscoveryLog) -> String {
    let mut s = format!(
        "\nDiscovery Log Number of Records {}, Generation counter {}\n",
        log.numrec, log.genctr
    );
    for (i, e) in log.entries.iter().enumerate() {
        s += &format!("=====Discovery Log Entry {i}======\n");
        s += &format!("trtype:  {}\n", trtype_str(e.trtype));
        s += &format!("adrfam:  {}\n", adrfam_str(e.adrfam));
        s += &format!("subtype: {}\n", subtype_str(e.subtype));
        s += &format!("treq:    {}\n", treq_str(e.treq));
        s += &format!("portid:  {}\n", e.portid);
        s += &format!("trsvcid: {}\n", e.trsvcid);
        s += &format!("subnqn:  {}\n", e.subnqn);
        s += &format!("traddr:  {}\n", e.traddr);
        s += &format!("eflags:  {}\n", eflags_str(e.eflags));
        s += &format!("sectype: {}\n", sectype_str(e));
        if e.trtype == trtype::RDMA {
            // nvme-cli's RDMA lines (TSAS bytes 0..3).
            let prtype = match e.rdma_prtype {
                1 => "not specified",
                2 => "infiniband",
                3 => "roce",
                4 => "roce-v2",
                5 => "iwarp",
                _ => "unrecognized",
            };
            let qptype = match e.tcp_sectype {
                1 => "connected",
                2 => "datagram",
                _ => "unrecognized",
            };
            let cms = if e.rdma_cms == 1 {
                "rdma-cm"
            } else {
                "unrecognized"
            };
            s += &format!("rdma_prtype: {prtype}\nrdma_qptype: {qptype}\nrdma_cms:    {cms}\n");
        }
    }
    s
}

/// The JSON form: `{"genctr": N, "records": [...]}` with nvme-cli's field names.
pub fn to_json(log: &DiscoveryLog) -> serde_json::Value {
    let records: Vec<_> = log
        .entries
        .iter()
        .map(|e| {
            json!({
                "trtype": trtype_str(e.trtype),
                "adrfam": adrfam_str(e.adrfam),
                "subtype": subtype_str(e.subtype),
                "treq": treq_str(e.treq),
                "portid": e.portid,
                "trsvcid": e.trsvcid,
                "subnqn": e.subnqn,
                "traddr": e.traddr,
                "eflags": eflags_str(e.eflags),
                "sectype": sectype_str(e),
                "cntlid": e.cntlid,
                "asqsz": e.asqsz,
            })
        })
        .collect();
    json!({ "genctr": log.genctr, "numrec": log.numrec, "records": records })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> DiscoveryLog {
        let e = DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: treq::NOT_REQUIRED | treq::DISABLE_SQFLOW,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: eflags::EPCSD | eflags::DUPRETINFO,
            trsvcid: "4420".into(),
            subnqn: "nqn.2026-11.io.ebof:default".into(),
            traddr: "127.0.0.1".into(),
            tcp_sectype: tcp_sectype::NONE,
            ..Default::default()
        };
        DiscoveryLog {
            genctr: 3,
            numrec: 1,
            recfmt: 0,
            entries: vec![e],
        }
    }

    #[test]
    fn text_like_nvme_cli() {
        let t = to_text(&log());
        assert!(t.contains("Discovery Log Number of Records 1, Generation counter 3\n"));
        assert!(t.contains("=====Discovery Log Entry 0======\ntrtype:  tcp\nadrfam:  ipv4\nsubtype: nvme subsystem\n"));
        assert!(t.contains("treq:    not required, sq flow control disable supported\n"));
        assert!(t.contains(
            "eflags:  explicit discovery connections, duplicate discovery information\n"
        ));
        assert!(t.contains("sectype: none\n"));
    }

    #[test]
    fn only_a_refused_connection_falls_back() {
        use std::io::{Error, ErrorKind};
        assert!(is_refused(&HostError::Transport(Error::from(
            ErrorKind::ConnectionRefused
        ))));
        assert!(!is_refused(&HostError::Transport(Error::from(
            ErrorKind::ConnectionReset
        ))));
        assert!(!is_refused(&HostError::Timeout("Fabrics Connect")));
    }

    #[test]
    fn json_records() {
        let j = to_json(&log());
        assert_eq!(j["genctr"], 3);
        assert_eq!(j["records"][0]["subnqn"], "nqn.2026-11.io.ebof:default");
        assert_eq!(j["records"][0]["trsvcid"], "4420");
        assert_eq!(j["records"][0]["subtype"], "nvme subsystem");
    }
}
