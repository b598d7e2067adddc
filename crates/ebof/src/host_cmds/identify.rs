//! `ebof identify`: Identify Controller and Identify Namespace of a subsystem, as text (in the
//! style of `nvme id-ctrl` / `nvme id-ns`) or JSON.

use anyhow::{Context, Result};
use nvme_spec::NamespaceId;
use nvme_spec::identify::{IdentifyController, IdentifyNamespace, NsIdDescriptor};
use nvmf_host::Controller;
use serde_json::{Value, json};

use super::common::{apply_transport, hex, resolve, runtime, uuid_str};

#[derive(clap::Args, Debug)]
pub struct IdentifyArgs {
    #[command(flatten)]
    pub target: super::common::SubsystemArgs,
    /// Only this namespace (default: every active namespace).
    #[arg(long, value_name = "N")]
    pub nsid: Option<u32>,
    #[command(flatten)]
    pub host: super::common::HostIdArgs,
    #[command(flatten)]
    pub security: super::common::SecurityArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Output format, as nvme-cli's `-o`: `normal` or `json` (the same as `--json`).
    #[arg(short = 'o', long = "output-format", value_name = "FMT", value_enum)]
    pub output_format: Option<super::common::OutputFormat>,
}

/// What was read from the controller.
struct Identified {
    cap: u64,
    vs: u32,
    ctrl: IdentifyController,
    namespaces: Vec<(NamespaceId, IdentifyNamespace, Vec<NsIdDescriptor>)>,
}

pub fn identify(a: IdentifyArgs) -> Result<()> {
    let addr = resolve(&a.target.traddr, a.target.trsvcid)?;
    let mut cfg = a.host.config()?;
    a.security.apply(&mut cfg)?;
    apply_transport(a.target.transport, &mut cfg)?;
    cfg.io_queues = 0;
    cfg.async_events = false;
    let id = runtime()?.block_on(async {
        let ctrl = Controller::connect(addr, &a.target.nqn, &cfg)
            .await
            .with_context(|| {
                format!(
                    "cannot connect to {} at {addr} as host {}",
                    a.target.nqn, cfg.hostnqn
                )
            })?;
        let r = read_all(&ctrl, a.nsid).await;
        if let Err(e) = ctrl.shutdown().await {
            tracing::debug!(error = %e, "shutdown failed");
        }
        ctrl.disconnect().await;
        r
    })?;
    if super::common::wants_json(a.json, a.output_format) {
        println!("{}", serde_json::to_string_pretty(&to_json(&id))?);
    } else {
        print!("{}", to_text(&id));
    }
    Ok(())
}

async fn read_all(ctrl: &Controller, nsid: Option<u32>) -> Result<Identified> {
    let c = ctrl
        .identify_controller()
        .await
        .context("Identify Controller")?;
    let nsids = match nsid {
        Some(n) => vec![NamespaceId(n)],
        None => ctrl
            .active_namespaces()
            .await
            .context("Identify Active Namespace List")?,
    };
    let mut namespaces = Vec::new();
    for n in nsids {
        let ns = ctrl
            .identify_namespace(n)
            .await
            .with_context(|| format!("Identify Namespace {}", n.0))?;
        // Optional for a controller (NVMe 1.3+); an error just means "no descriptors".
        let descs = ctrl.ns_id_descriptors(n).await.unwrap_or_default();
        namespaces.push((n, ns, descs));
    }
    Ok(Identified {
        cap: ctrl.cap_raw(),
        vs: ctrl.version(),
        ctrl: c,
        namespaces,
    })
}

fn version_str(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xFF, v & 0xFF)
}

fn mdts_str(mdts: u8) -> String {
    if mdts == 0 {
        "unlimited".into()
    } else {
        format!("{} KiB", 4u64 << mdts)
    }
}

/// A 128-bit counter as a JSON number when it fits, else a decimal string.
fn num128(v: u128) -> Value {
    u64::try_from(v).map_or_else(|_| Value::String(v.to_string()), Value::from)
}

/// The namespace identifiers: from the descriptor list, falling back to Identify Namespace.
fn ns_ids(ns: &IdentifyNamespace, descs: &[NsIdDescriptor]) -> (String, String, Option<String>) {
    let mut nguid = hex(&ns.nguid);
    let mut eui64 = hex(&ns.eui64);
    let mut uuid = None;
    for d in descs {
        match d {
            NsIdDescriptor::Nguid(v) => nguid = hex(v),
            NsIdDescriptor::Eui64(v) => eui64 = hex(v),
            NsIdDescriptor::Uuid(v) => uuid = Some(uuid_str(v)),
            NsIdDescriptor::Csi(_) => {}
        }
    }
    (nguid, eui64, uuid)
}

fn to_text(id: &Identified) -> String {
    let c = &id.ctrl;
    let mut s = String::from("NVME Identify Controller:\n");
    let mut line = |k: &str, v: String| s += &format!("{k:<9} : {v}\n");
    line("vid", format!("{:#06x}", c.vid));
    line("ssvid", format!("{:#06x}", c.ssvid));
    line("sn", c.sn.clone());
    line("mn", c.mn.clone());
    line("fr", c.fr.clone());
    line("rab", c.rab.to_string());
    line("ieee", hex(&[c.ieee[2], c.ieee[1], c.ieee[0]]));
    line("cmic", format!("{:#x}", c.cmic));
    line("mdts", format!("{} ({})", c.mdts, mdts_str(c.mdts)));
    line("cntlid", format!("{:#x}", c.cntlid));
    line("ver", format!("{:#x} ({})", c.ver, version_str(c.ver)));
    line("rtd3r", format!("{:#x}", c.rtd3r));
    line("rtd3e", format!("{:#x}", c.rtd3e));
    line("oaes", format!("{:#x}", c.oaes));
    line("ctratt", format!("{:#x}", c.ctratt));
    line("cntrltype", c.cntrltype.to_string());
    line("oacs", format!("{:#x}", c.oacs));
    line("acl", c.acl.to_string());
    line("aerl", c.aerl.to_string());
    line("frmw", format!("{:#x}", c.frmw));
    line("lpa", format!("{:#x}", c.lpa));
    line("elpe", c.elpe.to_string());
    line("npss", c.npss.to_string());
    line("tnvmcap", c.tnvmcap.to_string());
    line("unvmcap", c.unvmcap.to_string());
    line("kas", c.kas.to_string());
    line("anacap", format!("{:#x}", c.anacap));
    line("sqes", format!("{:#x}", c.sqes));
    line("cqes", format!("{:#x}", c.cqes));
    line("maxcmd", c.maxcmd.to_string());
    line("nn", c.nn.to_string());
    line("oncs", format!("{:#x}", c.oncs));
    line("fuses", format!("{:#x}", c.fuses));
    line("vwc", format!("{:#x}", c.vwc));
    line("awun", c.awun.to_string());
    line("awupf", c.awupf.to_string());
    line("sgls", format!("{:#x}", c.sgls));
    line("mnan", c.mnan.to_string());
    line("subnqn", c.subnqn.clone());
    line(
        "ioccsz",
        format!(
            "{} ({} B in-capsule data)",
            c.ioccsz,
            (c.ioccsz as usize * 16).saturating_sub(64)
        ),
    );
    line("iorcsz", c.iorcsz.to_string());
    line("icdoff", c.icdoff.to_string());
    line("fcatt", format!("{:#x}", c.fcatt));
    line("msdbd", c.msdbd.to_string());
    line("ofcs", format!("{:#x}", c.ofcs));
    line("cap", format!("{:#018x}", id.cap));
    line("vs", format!("{:#x} ({})", id.vs, version_str(id.vs)));
    for (nsid, ns, descs) in &id.namespaces {
        s += &format!("\nNVME Identify Namespace {}:\n", nsid.0);
        let lba = ns.lba_size();
        let (nguid, eui64, uuid) = ns_ids(ns, descs);
        let mut line = |k: &str, v: String| s += &format!("{k:<9} : {v}\n");
        line(
            "nsze",
            format!(
                "{:#x} ({} blocks, {} bytes)",
                ns.nsze,
                ns.nsze,
                ns.nsze.saturating_mul(u64::from(lba))
            ),
        );
        line("ncap", format!("{:#x}", ns.ncap));
        line("nuse", format!("{:#x}", ns.nuse));
        line("nsfeat", format!("{:#x}", ns.nsfeat));
        line("nlbaf", ns.nlbaf.to_string());
        line("flbas", format!("{:#x}", ns.flbas));
        line("dlfeat", ns.dlfeat.to_string());
        line("nmic", format!("{:#x}", ns.nmic));
        line("rescap", format!("{:#x}", ns.rescap));
        line("anagrpid", ns.anagrpid.to_string());
        line("nvmcap", ns.nvmcap.to_string());
        line("lba size", lba.to_string());
        line("nguid", nguid);
        line("eui64", eui64);
        line("uuid", uuid.unwrap_or_else(|| "-".into()));
        for (i, f) in ns.lbaf.iter().enumerate().take(usize::from(ns.nlbaf) + 1) {
            let used = if i == ns.lbaf_index() {
                " (in use)"
            } else {
                ""
            };
            s += &format!(
                "lbaf {i:>3} : ms:{:<3} lbads:{:<2} rp:{:#x}{used}\n",
                f.ms, f.lbads, f.rp
            );
        }
    }
    s
}

fn to_json(id: &Identified) -> Value {
    let c = &id.ctrl;
    // Two halves: one json! of all fields exceeds the macro recursion limit.
    let mut ctrl = json!({
        "vid": c.vid, "ssvid": c.ssvid, "sn": c.sn, "mn": c.mn, "fr": c.fr, "rab": c.rab,
        "ieee": hex(&[c.ieee[2], c.ieee[1], c.ieee[0]]), "cmic": c.cmic, "mdts": c.mdts,
        "cntlid": c.cntlid, "ver": c.ver, "rtd3r": c.rtd3r, "rtd3e": c.rtd3e, "oaes": c.oaes,
        "ctratt": c.ctratt, "cntrltype": c.cntrltype, "oacs": c.oacs, "acl": c.acl, "aerl": c.aerl,
        "frmw": c.frmw, "lpa": c.lpa, "elpe": c.elpe, "npss": c.npss,
    });
    let rest = json!({
        "tnvmcap": num128(c.tnvmcap), "unvmcap": num128(c.unvmcap), "kas": c.kas,
        "anacap": c.anacap, "sqes": c.sqes, "cqes": c.cqes, "maxcmd": c.maxcmd, "nn": c.nn,
        "oncs": c.oncs, "fuses": c.fuses, "vwc": c.vwc, "awun": c.awun, "awupf": c.awupf,
        "sgls": c.sgls, "mnan": c.mnan, "subnqn": c.subnqn, "ioccsz": c.ioccsz,
        "iorcsz": c.iorcsz, "icdoff": c.icdoff, "fcatt": c.fcatt, "msdbd": c.msdbd, "ofcs": c.ofcs,
    });
    if let (Some(a), Value::Object(b)) = (ctrl.as_object_mut(), rest) {
        a.extend(b);
    }
    let namespaces: Vec<Value> = id
        .namespaces
        .iter()
        .map(|(nsid, ns, descs)| {
            let (nguid, eui64, uuid) = ns_ids(ns, descs);
            let lbafs: Vec<Value> = ns
                .lbaf
                .iter()
                .take(usize::from(ns.nlbaf) + 1)
                .map(|f| json!({ "ms": f.ms, "lbads": f.lbads, "rp": f.rp }))
                .collect();
            json!({
                "nsid": nsid.0, "nsze": ns.nsze, "ncap": ns.ncap, "nuse": ns.nuse,
                "nsfeat": ns.nsfeat, "nlbaf": ns.nlbaf, "flbas": ns.flbas, "dlfeat": ns.dlfeat,
                "nmic": ns.nmic, "anagrpid": ns.anagrpid, "nvmcap": num128(ns.nvmcap),
                "lba_size": ns.lba_size(), "nguid": nguid, "eui64": eui64, "uuid": uuid,
                "lbafs": lbafs,
            })
        })
        .collect();
    json!({
        "cap": id.cap,
        "vs": id.vs,
        "controller": ctrl,
        "namespaces": namespaces,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::identify::LbaFormat;

    fn sample() -> Identified {
        let ctrl = IdentifyController {
            vid: 0x1b36,
            sn: "SN1".into(),
            mn: "ebof".into(),
            fr: "0.1".into(),
            mdts: 5,
            ver: 0x20000,
            nn: 1,
            ioccsz: 260,
            subnqn: "nqn.2026-11.io.ebof:default".into(),
            tnvmcap: u128::MAX,
            ..Default::default()
        };
        let mut ns = IdentifyNamespace {
            nsze: 131072,
            ncap: 131072,
            nuse: 0,
            ..Default::default()
        };
        ns.lbaf[0] = LbaFormat::new(9);
        Identified {
            cap: 0x2000_0f01_007f,
            vs: 0x20000,
            ctrl,
            namespaces: vec![(NamespaceId(1), ns, vec![NsIdDescriptor::Uuid([0x11; 16])])],
        }
    }

    #[test]
    fn text_and_json() {
        let id = sample();
        let t = to_text(&id);
        assert!(t.contains("vid       : 0x1b36\n"));
        assert!(t.contains("mdts      : 5 (128 KiB)\n"));
        assert!(t.contains("ioccsz    : 260 (4096 B in-capsule data)\n"));
        assert!(t.contains("NVME Identify Namespace 1:"));
        assert!(t.contains("lba size  : 512\n"));
        assert!(t.contains("uuid      : 11111111-1111-1111-1111-111111111111\n"));
        assert!(t.contains("lbaf   0 : ms:0   lbads:9  rp:0x0 (in use)\n"));
        let j = to_json(&id);
        assert_eq!(j["controller"]["sn"], "SN1");
        assert_eq!(j["controller"]["tnvmcap"], u128::MAX.to_string());
        assert_eq!(j["namespaces"][0]["nsze"], 131072);
        assert_eq!(j["namespaces"][0]["lba_size"], 512);
    }
}
