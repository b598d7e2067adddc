//! `ebof csi`: the Container Storage Interface driver (crate `ebof-csi`) — the controller
//! role provisions volumes on ebof pool boxes, the node role attaches them with the kernel
//! initiator; one process may do both.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

/// `ebof csi` arguments.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  ebof csi --endpoint unix:///csi/csi.sock --controller --boxes /etc/ebof-csi/boxes.toml\n  ebof csi --endpoint unix:///csi/csi.sock --node --zone rack-a\n\nThe boxes file lists [[boxes]] with api = \"ADDR:PORT\" (the box's [management] listen),\ntoken_file = \"PATH\" and an optional zone = \"…\". See docs/guide/kubernetes.md."
)]
pub struct CsiArgs {
    /// The CSI endpoint: unix:///PATH (what the sidecars' --csi-address names).
    #[arg(long, value_name = "unix:///PATH")]
    pub endpoint: String,
    /// Serve the Controller service (needs --boxes).
    #[arg(long, requires = "boxes")]
    pub controller: bool,
    /// The boxes file of the controller.
    #[arg(long, value_name = "FILE")]
    pub boxes: Option<PathBuf>,
    /// Serve the Node service (nvme connect, mkfs, mount on this machine).
    #[arg(long)]
    pub node: bool,
    /// The node ID: this host's NQN (default: the content of /etc/nvme/hostnqn).
    #[arg(long, value_name = "NQN", requires = "node")]
    pub node_id: Option<String>,
    /// The node's zone (topology.csi.ebof.io/zone), matched against the boxes' zones.
    #[arg(long, value_name = "ZONE", requires = "node")]
    pub zone: Option<String>,
    /// The driver name (CSIDriver object, StorageClass provisioner).
    #[arg(long, default_value = ebof_csi::DRIVER_NAME)]
    pub driver_name: String,
}

/// Run `ebof csi` until SIGTERM or SIGINT.
pub fn run(a: CsiArgs) -> Result<()> {
    crate::serve::init_tracing();
    if !a.controller && !a.node {
        anyhow::bail!("say what to serve: --controller --boxes FILE, --node, or both");
    }
    let node = if a.node {
        Some(ebof_csi::node::NodeConfig::new(a.node_id, a.zone)?)
    } else {
        None
    };
    ebof_csi::server::run(ebof_csi::server::Options {
        endpoint: a.endpoint,
        driver_name: a.driver_name,
        boxes: if a.controller { a.boxes } else { None },
        node,
    })
}
