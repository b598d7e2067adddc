//! `ebof csi`: the gRPC server on the CSI endpoint (a Unix socket), serving Identity and the
//! Controller and/or Node services, until SIGTERM or SIGINT.

use crate::controller::Controller;
use crate::identity::Identity;
use crate::node::{Node, NodeConfig};
use crate::pb;
use anyhow::{Context, bail};
use std::future::Future;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// What `ebof csi` was asked to serve.
#[derive(Clone, Debug)]
pub struct Options {
    /// `unix:///PATH` (or an absolute path).
    pub endpoint: String,
    /// Driver name.
    pub driver_name: String,
    /// Serve the Controller service on the boxes of this file.
    pub boxes: Option<PathBuf>,
    /// Serve the Node service.
    pub node: Option<NodeConfig>,
}

/// The socket path of a CSI endpoint: `unix:///csi/csi.sock`, `unix:/csi/csi.sock` or
/// `/csi/csi.sock`.
pub fn endpoint_path(endpoint: &str) -> anyhow::Result<PathBuf> {
    let p = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        bail!(
            "--endpoint {endpoint:?}: only unix:///PATH endpoints are served (CSI uses a Unix socket)"
        )
    } else {
        endpoint
    };
    if !p.starts_with('/') {
        bail!("--endpoint {endpoint:?}: the socket path must be absolute (unix:///PATH)");
    }
    Ok(PathBuf::from(p))
}

/// Bind the endpoint's socket: a stale socket file from an earlier run is replaced; any
/// other file there is an error (never deleted).
fn bind(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the endpoint directory {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?,
        Ok(_) => bail!(
            "endpoint {} exists and is not a socket; not replacing it",
            path.display()
        ),
        Err(_) => {}
    }
    tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding the CSI endpoint {}", path.display()))
}

/// Serve until `shutdown` completes. Fails before serving when the options, the boxes file
/// or the node's identity are wrong.
pub async fn serve(opts: Options, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    if opts.boxes.is_none() && opts.node.is_none() {
        bail!("say what to serve: --controller (with --boxes FILE), --node, or both");
    }
    let path = endpoint_path(&opts.endpoint)?;
    let controller = match &opts.boxes {
        Some(f) => Some(Controller::from_fleet(crate::boxes::load_fleet(f)?)),
        None => None,
    };
    let node = match &opts.node {
        Some(cfg) => Some(Node::new(cfg.clone())?),
        None => None,
    };
    let topology = controller.as_ref().is_some_and(|c| c.has_zones())
        || opts.node.as_ref().is_some_and(|n| n.zone.is_some());
    let identity = Identity {
        name: opts.driver_name.clone(),
        controller: controller.is_some(),
        topology,
    };
    let listener = bind(&path)?;
    tracing::info!(
        endpoint = %path.display(),
        driver = %opts.driver_name,
        controller = controller.is_some(),
        node = node.is_some(),
        "ebof csi serving"
    );
    // Every connection through AuthorityFix: h2 would reset the requests of the many gRPC
    // clients that send the socket path as :authority (src/authority.rs).
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        |conn| conn.map(crate::authority::AuthorityFix::new),
    );
    let result = tonic::transport::Server::builder()
        .add_service(pb::identity_server::IdentityServer::new(identity))
        .add_optional_service(controller.map(pb::controller_server::ControllerServer::new))
        .add_optional_service(node.map(pb::node_server::NodeServer::new))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    let _ = std::fs::remove_file(&path);
    result.context("serving gRPC")?;
    tracing::info!("ebof csi stopped");
    Ok(())
}

/// `ebof csi`: serve on a runtime of its own until SIGTERM or SIGINT.
pub fn run(opts: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let stop = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        serve(opts, stop).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_socket_paths() {
        assert_eq!(
            endpoint_path("unix:///csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(endpoint_path("unix:/a/b").unwrap(), PathBuf::from("/a/b"));
        assert_eq!(endpoint_path("/a/b").unwrap(), PathBuf::from("/a/b"));
        for bad in [
            "tcp://127.0.0.1:10000",
            "unix://relative.sock",
            "x.sock",
            "",
        ] {
            assert!(endpoint_path(bad).is_err(), "{bad}");
        }
    }
}
