//! Pull registration, the member's side (TP 8010): a discovery controller announces itself to
//! a CDC with DIM (admin 21h, task register, ETYPE DDC, one NVMe/TCP entry per discovery
//! port) on a persistent discovery connection, registers again whenever that connection comes
//! back, and deregisters when stopped.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use nvme_spec::dim::{DimData, DimTask, EntityType};
use nvme_spec::opcode::admin;
use nvme_spec::{CommandId, Sqe};
use nvmf_host::{Controller, DataDir, HostConfig};
use tokio::sync::watch;

/// What and where to announce.
#[derive(Clone, Debug)]
pub struct AnnounceConfig {
    /// The CDC's discovery service.
    pub cdc: SocketAddr,
    /// This discovery controller's NQN (EID, and the host NQN of the connection).
    pub nqn: String,
    /// This box's discovery ports (NVMe/TCP), as hosts should reach them.
    pub addrs: Vec<SocketAddr>,
    /// ENAME (e.g. the host name).
    pub name: String,
    /// Longest delay between two attempts (default 10 s).
    pub backoff_max: Duration,
    /// DH-HMAC-CHAP secrets for `nqn`, used when the CDC asks for authentication: a CDC
    /// admits the pull registration of any discovery controller that authenticated.
    pub dhchap: Option<nvmf_host::DhchapKeys>,
}

/// A running announcement; deregisters (bounded) on [`Announcer::stop`] or drop.
#[derive(Debug)]
pub struct Announcer {
    stop: watch::Sender<bool>,
    thread: Mutex<Option<(std::thread::JoinHandle<()>, std::sync::mpsc::Receiver<()>)>>,
}

/// The DIM command carrying `data` for `task`.
fn dim(task: DimTask, data: &DimData) -> (Sqe, Vec<u8>) {
    let out = data.encode();
    let mut sqe = Sqe::new(admin::DISCOVERY_INFO_MGMT, CommandId(0));
    sqe.set_cdw(10, task.cdw10());
    (sqe, out)
}

impl Announcer {
    /// Start announcing `cfg.addrs` to `cfg.cdc` on a thread of its own.
    pub fn start(cfg: AnnounceConfig) -> std::io::Result<Announcer> {
        let (stop, rx) = watch::channel(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ebof-announce".into())
            .spawn(move || {
                rt.block_on(run(cfg, rx));
                let _ = done_tx.send(());
            })?;
        Ok(Announcer {
            stop,
            thread: Mutex::new(Some((thread, done_rx))),
        })
    }

    /// Deregister and close the connection; waits at most 3 s.
    pub fn stop(&self) {
        let Some((thread, done)) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take()
        else {
            return;
        };
        let _ = self.stop.send(true);
        if done.recv_timeout(Duration::from_secs(3)).is_ok() {
            let _ = thread.join();
        }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn run(cfg: AnnounceConfig, mut stop: watch::Receiver<bool>) {
    let data = DimData::discovery_controller(
        EntityType::Ddc,
        &cfg.nqn,
        &cfg.name,
        concat!("ebof ", env!("CARGO_PKG_VERSION")),
        &cfg.addrs,
    );
    let host = HostConfig {
        hostnqn: cfg.nqn.clone(),
        hostid: crate::derived_hostid(&cfg.nqn),
        kato_ms: 30_000,
        io_queues: 0,
        async_events: true,
        connect_timeout: Duration::from_secs(5),
        admin_timeout: Duration::from_secs(5),
        dhchap: cfg.dhchap.clone(),
        ..HostConfig::default()
    };
    let mut backoff = crate::BACKOFF_MIN;
    loop {
        let attempt = async {
            let mut c = Controller::connect(cfg.cdc, nvme_spec::DISCOVERY_NQN, &host).await?;
            let (sqe, out) = dim(DimTask::Register, &data);
            c.admin(sqe, DataDir::ToController, out, 0).await?;
            Ok::<_, nvmf_host::HostError>((c.take_events(), c))
        };
        let r = tokio::select! {
            r = attempt => r,
            _ = stop.changed() => return,
        };
        match r {
            Ok((events, c)) => {
                tracing::info!(cdc = %cfg.cdc, "announced to the central discovery controller");
                backoff = crate::BACKOFF_MIN;
                let mut events = events;
                let lost = async {
                    match events.as_mut() {
                        Some(ev) => while ev.recv().await.is_some() {},
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = lost => {
                        tracing::warn!(cdc = %cfg.cdc, "connection to the central discovery controller lost");
                    }
                    _ = stop.changed() => {
                        let (sqe, out) = dim(DimTask::Deregister, &data);
                        let _ = tokio::time::timeout(
                            Duration::from_secs(2),
                            c.admin(sqe, DataDir::ToController, out, 0),
                        )
                        .await;
                        c.disconnect().await;
                        return;
                    }
                }
                c.disconnect().await;
            }
            Err(e) => {
                tracing::warn!(cdc = %cfg.cdc, error = %e, "cannot announce to the central discovery controller");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(cfg.backoff_max.max(crate::BACKOFF_MIN));
    }
}
