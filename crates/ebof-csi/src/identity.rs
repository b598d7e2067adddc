//! The CSI Identity service: the plugin's name and version, which services it offers, and
//! whether it is ready.

use crate::pb;
use crate::pb::plugin_capability::{
    Service, Type as CapType, VolumeExpansion, service, volume_expansion,
};
use tonic::{Request, Response, Status};

/// Identity as one `ebof csi` process serves it.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Driver name (`--driver-name`).
    pub name: String,
    /// Whether this process serves the Controller service (advertised as a capability).
    pub controller: bool,
    /// Whether volumes carry topology (zones in the boxes file, or `--zone` on the node).
    pub topology: bool,
}

#[tonic::async_trait]
impl pb::identity_server::Identity for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<pb::GetPluginInfoRequest>,
    ) -> Result<Response<pb::GetPluginInfoResponse>, Status> {
        Ok(Response::new(pb::GetPluginInfoResponse {
            name: self.name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").into(),
            manifest: [("project".to_string(), "ebof".to_string())].into(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<pb::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<pb::GetPluginCapabilitiesResponse>, Status> {
        let svc = |t: service::Type| pb::PluginCapability {
            r#type: Some(CapType::Service(Service { r#type: t as i32 })),
        };
        let mut capabilities = Vec::new();
        if self.controller {
            capabilities.push(svc(service::Type::ControllerService));
        }
        if self.topology {
            capabilities.push(svc(service::Type::VolumeAccessibilityConstraints));
        }
        capabilities.push(pb::PluginCapability {
            r#type: Some(CapType::VolumeExpansion(VolumeExpansion {
                r#type: volume_expansion::Type::Online as i32,
            })),
        });
        Ok(Response::new(pb::GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        Ok(Response::new(pb::ProbeResponse { ready: Some(true) }))
    }
}
