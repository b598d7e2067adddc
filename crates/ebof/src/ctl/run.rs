//! `ebof ctl`'s running: one small function per subcommand, each a request to the management
//! API and its answer printed (JSON with `--json`, else the text of [`super::render`]).

use super::args::{
    AnaCmd, CdcCmd, CtlArgs, CtlCmd, DimCmd, HostCmd, ListenerCmd, NsAddArgs, NsCmd, NsQosArgs,
    PoolCmd, ReferralCmd, SnapshotCmd, SubsystemCmd,
};
use super::render::{self, ns_hosts_text, qos_text};
use super::{absolute, client, err};
use anyhow::Result;
use ebof_api::Client;
use ebof_api::{ListenerView, NamespaceChanged, NamespaceRequest};
use ebof_config::format_size;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Print an answer: as the API gave it (pretty JSON) with `--json`, else as `text` says (it
/// brings its own line ends).
fn emit<T: Serialize>(json: bool, v: &T, text: impl FnOnce(&T) -> String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(v)?);
    } else {
        print!("{}", text(v));
    }
    Ok(())
}

/// `ebof ctl`.
pub fn run(a: CtlArgs) -> Result<()> {
    if let Some(file) = &a.boxes {
        return fleet(&a, file);
    }
    let c = client(&a)?;
    let json = a.json;
    match a.cmd {
        CtlCmd::Show => emit(json, &c.state().map_err(err)?, render::show_text),
        CtlCmd::Top(ref t) => {
            let one = super::fleet::Member {
                name: String::new(),
                api: c.endpoint(),
                zone: None,
                client: c.clone(),
                token_file: None,
            };
            super::top::run(&[one], false, t, json, super::fleet::DEFAULT_TIMEOUT)
        }
        CtlCmd::Dump { ref output } => super::dump::run(&c, &a, output),
        CtlCmd::Stats { watch, count } => stats(&c, json, watch, count),
        CtlCmd::Metrics => {
            print!("{}", c.metrics().map_err(err)?);
            Ok(())
        }
        CtlCmd::Subsystem { cmd } => subsystem(&c, json, cmd),
        CtlCmd::Host { cmd } => host(&c, json, cmd),
        CtlCmd::Ns { cmd } => ns(&c, json, cmd),
        CtlCmd::Pool { cmd: PoolCmd::List } => {
            emit(json, &c.pools().map_err(err)?, |l| render::pools_text(l))
        }
        CtlCmd::Snapshot { cmd } => snapshot(&c, json, cmd),
        CtlCmd::Listener { cmd } => listener(&c, json, cmd),
        CtlCmd::Ana { cmd } => ana(&c, json, cmd),
        CtlCmd::Mdns { mode } => {
            let v = match mode {
                Some(mode) => c.set_mdns(&ebof_api::MdnsRequest { mode }).map_err(err)?,
                None => c.mdns().map_err(err)?,
            };
            emit(json, &v, render::mdns_text)
        }
        CtlCmd::Referral { cmd } => referral(&c, json, cmd),
        CtlCmd::Dim { cmd: DimCmd::List } => emit(json, &c.registrations().map_err(err)?, |r| {
            render::registrations_text(r)
        }),
        CtlCmd::Save { file } => save(&c, json, file),
        CtlCmd::Cdc { cmd } => cdc(&c, json, cmd),
        CtlCmd::Disconnect { cntlid } => {
            let d = c.disconnect(&cntlid).map_err(err)?;
            emit(json, &d, |d| {
                format!("controller {} ({}) disconnected\n", d.cntlid, d.hostnqn)
            })
        }
    }
}

/// `ebof ctl --boxes FILE show|top|dump`: every box of the file.
fn fleet(a: &CtlArgs, file: &std::path::Path) -> Result<()> {
    let within = super::fleet::timeout(a.box_timeout)?;
    let members = super::fleet::load(file)?;
    match &a.cmd {
        CtlCmd::Show => super::fleet::show(&members, within, a.json),
        CtlCmd::Top(t) => super::top::run(&members, true, t, a.json, within),
        CtlCmd::Dump { output } => super::dump::run_fleet(&members, a.box_timeout, output),
        _ => anyhow::bail!(
            "--boxes goes with show and top, and dump (other commands act on one box: --api)"
        ),
    }
}

/// `ebof ctl stats [--watch [--count N]]`.
fn stats(c: &Client, json: bool, watch: bool, count: Option<u32>) -> Result<()> {
    let rounds = if watch { count.unwrap_or(u32::MAX) } else { 1 };
    for i in 0..rounds {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let s = c.stats().map_err(err)?;
        if json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            if watch && rounds == u32::MAX {
                // Clear the screen, as `watch` does.
                print!("\x1b[H\x1b[2J");
            }
            print!("{}", render::stats_text(&s));
        }
    }
    Ok(())
}

/// `ebof ctl subsystem add|remove`.
fn subsystem(c: &Client, json: bool, cmd: SubsystemCmd) -> Result<()> {
    match cmd {
        SubsystemCmd::Add {
            nqn,
            serial,
            model,
            no_allow_any_host,
        } => {
            let req = ebof_api::SubsystemRequest {
                nqn,
                serial,
                model,
                allow_any_host: Some(!no_allow_any_host),
            };
            let s = c.add_subsystem(&req).map_err(err)?;
            emit(json, &s, |s| {
                format!("subsystem {} added (serial {})\n", s.nqn, s.serial)
            })
        }
        SubsystemCmd::Remove { nqn } => {
            let r = c.remove_subsystem(&nqn).map_err(err)?;
            emit(json, &r, |r| {
                format!(
                    "subsystem {} removed ({} controller(s) disconnected)\n",
                    r.nqn,
                    r.disconnected.len()
                )
            })
        }
    }
}

/// `ebof ctl host allow|deny|allow-any`.
fn host(c: &Client, json: bool, cmd: HostCmd) -> Result<()> {
    let (s, what) = match cmd {
        HostCmd::Allow { nqn, hostnqn } => (
            c.allow_host(&nqn, &hostnqn),
            format!("{hostnqn} may connect to {nqn}"),
        ),
        HostCmd::Deny { nqn, hostnqn } => (
            c.deny_host(&nqn, &hostnqn),
            format!("{hostnqn} removed from the hosts of {nqn}"),
        ),
        HostCmd::AllowAny { nqn, state } => {
            let on = state == "on";
            let what = if on {
                format!("{nqn} allows any host")
            } else {
                format!("{nqn} allows only its host list")
            };
            (c.set_allow_any_host(&nqn, on), what)
        }
    };
    emit(json, &s.map_err(err)?, |_| format!("{what}\n"))
}

/// `ebof ctl snapshot list|delete`.
fn snapshot(c: &Client, json: bool, cmd: SnapshotCmd) -> Result<()> {
    match cmd {
        SnapshotCmd::List => emit(json, &c.snapshots().map_err(err)?, |l| {
            render::snapshots_text(l)
        }),
        SnapshotCmd::Delete { name } => {
            let r = c.delete_snapshot(&name).map_err(err)?;
            emit(json, &r, |r| {
                format!("snapshot {} deleted ({} removed)\n", r.name, r.path)
            })
        }
    }
}

/// `ebof ctl listener add|remove`.
fn listener(c: &Client, json: bool, cmd: ListenerCmd) -> Result<()> {
    let kind = |l: &ListenerView| {
        if l.discovery { "discovery" } else { "NVMe/TCP" }
    };
    match cmd {
        ListenerCmd::Add { address, discovery } => {
            let l = c
                .add_listener(&ebof_api::ListenerRequest { address, discovery })
                .map_err(err)?;
            emit(json, &l, |l| {
                format!("listening on {} ({})\n", l.address, kind(l))
            })
        }
        ListenerCmd::Remove {
            address,
            disconnect,
        } => {
            let r = c.remove_listener(&address, disconnect).map_err(err)?;
            emit(json, &r, |r| {
                format!(
                    "stopped listening on {} ({}); {} controller(s) disconnected\n",
                    r.listener.address,
                    kind(&r.listener),
                    r.disconnected.len()
                )
            })
        }
    }
}

/// `ebof ctl ana set`.
fn ana(c: &Client, json: bool, cmd: AnaCmd) -> Result<()> {
    let AnaCmd::Set {
        listener,
        group,
        state,
    } = cmd;
    let req = ebof_api::AnaRequest {
        listener,
        group,
        state,
    };
    let r = c.set_ana(&req).map_err(err)?;
    emit(json, &r, |r| {
        format!(
            "ANA group {} on {} is {}{} (change count {})\n",
            r.ana.group,
            r.ana.listener,
            r.ana.state,
            if r.changed { "" } else { " already" },
            r.change_count
        )
    })
}

/// `ebof ctl referral add|remove|list`.
fn referral(c: &Client, json: bool, cmd: ReferralCmd) -> Result<()> {
    let r = match cmd {
        ReferralCmd::Add { address } => c.add_referral(&address),
        ReferralCmd::Remove { address } => c.remove_referral(&address),
        ReferralCmd::List => c.referrals(),
    }
    .map_err(err)?;
    emit(json, &r, |r| {
        let mut out = render::referrals_text(&r.referrals);
        if r.changed {
            out.push_str(&format!("discovery log generation {}\n", r.genctr));
        }
        out
    })
}

/// `ebof ctl save [FILE]`.
fn save(c: &Client, json: bool, file: Option<PathBuf>) -> Result<()> {
    let req = ebof_api::SaveRequest {
        path: file.map(|f| absolute(&f).display().to_string()),
    };
    let r = c.save(&req).map_err(err)?;
    emit(json, &r, |r| {
        format!(
            "running configuration saved to {} ({} bytes)\n",
            r.path, r.bytes
        )
    })
}

/// `ebof ctl cdc list|add|remove|trusted`.
fn cdc(c: &Client, json: bool, cmd: CdcCmd) -> Result<()> {
    match cmd {
        CdcCmd::List => emit(json, &c.cdc().map_err(err)?, render::cdc_text),
        CdcCmd::Add { address } => {
            let m = c.add_cdc_member(&address).map_err(err)?;
            emit(json, &m, |m| format!("{} is a member\n", m.address))
        }
        CdcCmd::Trusted { entries, clear } => {
            let v = if clear || !entries.is_empty() {
                c.set_cdc_trusted(&entries).map_err(err)?
            } else {
                c.cdc_trusted().map_err(err)?
            };
            emit(json, &v, |v| {
                if v.trusted.is_empty() {
                    "trusted: nobody (configured members and authenticated connections only)\n"
                        .to_string()
                } else {
                    v.trusted.iter().map(|t| format!("{t}\n")).collect()
                }
            })
        }
        CdcCmd::Remove { address } => {
            let v = c.remove_cdc_member(&address).map_err(err)?;
            emit(json, &v, |v| {
                format!(
                    "{address} is no longer a member ({} left)\n",
                    v.members.len()
                )
            })
        }
    }
}

/// A size argument (`4G`), or what is wrong with it, named `what`.
fn size(s: &str, what: &str) -> Result<u64> {
    ebof_config::parse_size(s).map_err(|e| anyhow::anyhow!("{what}: {}", e.message))
}

/// `ebof ctl ns …`.
fn ns(c: &Client, json: bool, cmd: NsCmd) -> Result<()> {
    match cmd {
        NsCmd::Add(add) => ns_add(c, json, *add),
        NsCmd::Mask {
            nqn,
            nsid,
            hostnqns,
        } => {
            let r = c.set_namespace_hosts(&nqn, &nsid, &hostnqns).map_err(err)?;
            print_ns_hosts(json, &r)
        }
        NsCmd::Unmask { nqn, nsid } => {
            let r = c.unmask_namespace(&nqn, &nsid).map_err(err)?;
            print_ns_hosts(json, &r)
        }
        NsCmd::Attach { nqn, nsid, hostnqn } => {
            let r = c
                .attach_namespace_host(&nqn, &nsid, &hostnqn)
                .map_err(err)?;
            print_ns_hosts(json, &r)
        }
        NsCmd::Detach { nqn, nsid, hostnqn } => {
            let r = c
                .detach_namespace_host(&nqn, &nsid, &hostnqn)
                .map_err(err)?;
            print_ns_hosts(json, &r)
        }
        NsCmd::Remove { nqn, nsid } => {
            let r = c.remove_namespace(&nqn, &nsid).map_err(err)?;
            emit(json, &r, |r| {
                format!("namespace {} removed from {}\n", r.nsid, r.subsystem)
            })
        }
        NsCmd::Snapshot { nqn, nsid, name } => {
            let v = c.snapshot_namespace(&nqn, &nsid, &name).map_err(err)?;
            emit(json, &v, |v| {
                format!(
                    "snapshot {} of namespace {} of {} taken ({}, {}: I/O held {:.3} ms, {:.3} s \
                     in all) in {}\n",
                    v.name,
                    v.origin.nsid,
                    v.origin.subsystem,
                    format_size(v.size),
                    v.method,
                    v.pause_us as f64 / 1e3,
                    v.duration_us as f64 / 1e6,
                    v.path
                )
            })
        }
        NsCmd::Resize {
            nqn,
            nsid,
            size: new,
            shrink,
        } => {
            let req = ebof_api::ResizeRequest {
                size: size(&new, "SIZE")?,
                shrink,
            };
            let r = c.resize_namespace(&nqn, &nsid, &req).map_err(err)?;
            emit(json, &r, |r| {
                format!(
                    "namespace {} of {} is now {}\n",
                    r.namespace.nsid,
                    r.subsystem,
                    format_size(r.namespace.size)
                )
            })
        }
        NsCmd::Qos(qos) => ns_qos(c, json, qos),
        NsCmd::Mirror { cmd } => super::mirror::run(c, json, cmd),
    }
}

/// `ebof ctl ns add`: a namespace of RAM, a file, a block device or a pool, or a clone of a
/// snapshot.
fn ns_add(c: &Client, json: bool, a: NsAddArgs) -> Result<()> {
    let NsAddArgs {
        nqn,
        ram,
        file,
        block,
        size: file_size,
        nsid,
        block_size,
        uuid,
        direct,
        ana_group,
        hosts,
        from_snapshot,
        pool,
        mirror_peer,
        mirror_role,
        key_file,
    } = a;
    if file_size.is_some() && file.is_none() && pool.is_none() {
        anyhow::bail!("--size goes with --file PATH or --pool NAME");
    }
    if let Some(name) = from_snapshot {
        let req = ebof_api::CloneRequest {
            subsystem: nqn,
            nsid,
            path: file.map(|f| absolute(&f).display().to_string()),
            uuid,
            ana_group,
            hosts: (!hosts.is_empty()).then_some(hosts),
            pool,
            mirror: mirror_peer.map(|peer| ebof_config::MirrorFields {
                peer: Some(peer),
                role: mirror_role,
            }),
        };
        let r = c.clone_snapshot(&name, &req).map_err(err)?;
        return emit(json, &r, |r| {
            format!(
                "namespace {} added to {} from snapshot {} ({}, {} in {:.3} s, file {})\n",
                r.added.namespace.nsid,
                r.added.subsystem,
                r.snapshot,
                format_size(r.added.namespace.size),
                r.method,
                r.duration_us as f64 / 1e6,
                r.added.namespace.path.clone().unwrap_or_default()
            )
        });
    }
    let mut req = NamespaceRequest {
        ana_group,
        hosts: (!hosts.is_empty()).then_some(hosts),
        nsid,
        block_size: block_size.and_then(|b| b.parse().ok()),
        uuid,
        direct: direct.then_some(true),
        mirror: mirror_peer.map(|peer| ebof_config::MirrorFields {
            peer: Some(peer),
            role: mirror_role,
        }),
        encryption: key_file.map(|p| ebof_config::EncryptionFields {
            key_file: Some(p.display().to_string()),
        }),
        ..Default::default()
    };
    backing(&mut req, ram, file, block, pool, file_size)?;
    let in_pool = req.pool.clone();
    let r = c.add_namespace(&nqn, &req).map_err(err)?;
    emit(json, &r, |r| {
        format!(
            "namespace {} added to {} ({} {}, {} B blocks{})\n",
            r.namespace.nsid,
            r.subsystem,
            r.namespace.backend,
            format_size(r.namespace.size),
            r.namespace.block_size,
            match in_pool {
                Some(p) => format!(
                    ", pool {p}, file {}",
                    r.namespace.path.clone().unwrap_or_default()
                ),
                None => String::new(),
            }
        )
    })
}

/// What backs a new namespace (`--ram`, `--file`, `--block` or `--pool`), into `req`.
fn backing(
    req: &mut NamespaceRequest,
    ram: Option<String>,
    file: Option<PathBuf>,
    block: Option<PathBuf>,
    pool: Option<String>,
    file_size: Option<String>,
) -> Result<()> {
    match (ram, file, block) {
        (None, None, None) if pool.is_some() => {
            req.backend = "file".into();
            req.pool = pool;
            req.size = Some(size(
                file_size
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--pool needs --size SIZE (e.g. 10G)"))?,
                "--size",
            )?);
        }
        (Some(r), None, None) => {
            req.backend = "ram".into();
            req.size = Some(size(&r, "--ram")?);
        }
        (None, Some(f), None) => {
            req.backend = "file".into();
            req.path = Some(absolute(&f).display().to_string());
            req.size = file_size.map(|s| size(&s, "--size")).transpose()?;
        }
        (None, None, Some(b)) => {
            req.backend = "block".into();
            req.path = Some(absolute(&b).display().to_string());
        }
        _ => anyhow::bail!(
            "say what backs the namespace: --ram SIZE, --file PATH, --block DEV, --pool NAME or --from-snapshot NAME"
        ),
    }
    Ok(())
}

/// `ebof ctl ns qos`.
fn ns_qos(c: &Client, json: bool, a: NsQosArgs) -> Result<()> {
    let NsQosArgs {
        nqn,
        nsid,
        iops,
        mbps,
        read_iops,
        write_iops,
        read_mbps,
        write_mbps,
        clear,
    } = a;
    let req = ebof_api::QosRequest {
        iops,
        mbps,
        read_iops,
        write_iops,
        read_mbps,
        write_mbps,
    };
    let r = if clear {
        c.clear_namespace_qos(&nqn, &nsid).map_err(err)?
    } else {
        c.set_namespace_qos(&nqn, &nsid, &req).map_err(err)?
    };
    emit(json, &r, |r| {
        format!(
            "namespace {} of {}: QoS {}\n",
            r.namespace.nsid,
            r.subsystem,
            qos_text(r.namespace.qos.as_ref())
        )
    })
}

/// Who sees a namespace after a masking change, as `ebof ctl ns mask/unmask/attach/detach`
/// report it.
fn print_ns_hosts(json: bool, r: &NamespaceChanged) -> Result<()> {
    emit(json, r, |r| {
        format!(
            "namespace {} of {} is visible to {}\n",
            r.namespace.nsid,
            r.subsystem,
            ns_hosts_text(r.namespace.hosts.as_deref())
        )
    })
}
