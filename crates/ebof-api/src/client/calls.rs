//! One method per endpoint of the management API: the route, the method and the body.

use super::{Client, ClientError, SNAPSHOT_TIMEOUT};
use crate::hostkeys::{HostKeyRequest, HostKeyView};
use crate::{
    AllowAnyHostRequest, Disconnected, HostRequest, ListenerRemoved, ListenerRequest, ListenerView,
    NamespaceChanged, NamespaceRemoved, NamespaceRequest, ResizeRequest, SaveRequest, Saved, State,
    Stats, SubsystemRemoved, SubsystemRequest, SubsystemView, routes,
};
use hyper::Method;

impl Client {
    /// `GET /v1/state`: subsystems, listeners, controllers and ANA states.
    pub fn state(&self) -> Result<State, ClientError> {
        self.json(Method::GET, routes::STATE, None)
    }

    /// `GET /v1/stats`: namespace and connection counters.
    pub fn stats(&self) -> Result<Stats, ClientError> {
        self.json(Method::GET, routes::STATS, None)
    }

    /// `GET /v1/support`: versions and the running configuration, secrets redacted.
    pub fn support(&self) -> Result<crate::SupportView, ClientError> {
        self.json(Method::GET, routes::SUPPORT, None)
    }

    /// The Prometheus text exposition.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let (_, body) = self.request(Method::GET, routes::METRICS, None)?;
        String::from_utf8(body).map_err(|_| self.transport("metrics are not UTF-8"))
    }

    /// `POST /v1/subsystems`: create a subsystem without namespaces.
    pub fn add_subsystem(&self, req: &SubsystemRequest) -> Result<SubsystemView, ClientError> {
        self.json(Method::POST, routes::SUBSYSTEMS, Some(to_json(req)))
    }

    /// `DELETE /v1/subsystems/{nqn}`: remove a subsystem, disconnecting its controllers.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<SubsystemRemoved, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::SUBSYSTEM, &[nqn]),
            None,
        )
    }

    /// `POST /v1/subsystems/{nqn}/hosts`: allow host `hostnqn` to connect.
    pub fn allow_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ClientError> {
        let body = to_json(&HostRequest {
            hostnqn: hostnqn.into(),
        });
        self.json(
            Method::POST,
            &routes::fill(routes::HOSTS, &[nqn]),
            Some(body),
        )
    }

    /// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}`: refuse new Connects of
    /// `hostnqn` (its existing controllers stay).
    pub fn deny_host(&self, nqn: &str, hostnqn: &str) -> Result<SubsystemView, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::HOST, &[nqn, hostnqn]),
            None,
        )
    }

    /// `PUT /v1/subsystems/{nqn}/allow_any_host`: open the subsystem to any host, or close it.
    pub fn set_allow_any_host(&self, nqn: &str, on: bool) -> Result<SubsystemView, ClientError> {
        let body = to_json(&AllowAnyHostRequest { allow_any_host: on });
        self.json(
            Method::PUT,
            &routes::fill(routes::ALLOW_ANY_HOST, &[nqn]),
            Some(body),
        )
    }

    /// `DELETE /v1/controllers/{cntlid}`: tear down a controller and its queues.
    pub fn disconnect(&self, cntlid: &str) -> Result<Disconnected, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::CONTROLLER, &[cntlid]),
            None,
        )
    }

    /// Add a namespace to subsystem `nqn`.
    pub fn add_namespace(
        &self,
        nqn: &str,
        req: &NamespaceRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::POST,
            &routes::fill(routes::NAMESPACES, &[nqn]),
            Some(to_json(req)),
        )
    }

    /// Remove namespace `nsid` of `nqn`.
    pub fn remove_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceRemoved, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE, &[nqn, nsid]),
            None,
        )
    }

    /// `PUT …/namespaces/{nsid}/hosts`: only `hosts` see namespace `nsid` of `nqn`.
    pub fn set_namespace_hosts(
        &self,
        nqn: &str,
        nsid: &str,
        hosts: &[String],
    ) -> Result<NamespaceChanged, ClientError> {
        let body = to_json(&crate::NamespaceHostsRequest {
            hosts: hosts.to_vec(),
        });
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            Some(body),
        )
    }

    /// `DELETE …/namespaces/{nsid}/hosts`: namespace `nsid` of `nqn` visible to every host
    /// the subsystem admits again.
    pub fn unmask_namespace(&self, nqn: &str, nsid: &str) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            None,
        )
    }

    /// `GET …/namespaces/{nsid}/mirror`: the replication state of mirrored namespace `nsid`.
    pub fn mirror_status(&self, nqn: &str, nsid: &str) -> Result<crate::MirrorView, ClientError> {
        self.json(
            Method::GET,
            &routes::fill(routes::NAMESPACE_MIRROR, &[nqn, nsid]),
            None,
        )
    }

    /// `POST …/namespaces/{nsid}/mirror/promote`: the copy on this box becomes primary (the
    /// box waits for the namespace's commands to drain: up to a minute).
    pub fn promote_mirror(
        &self,
        nqn: &str,
        nsid: &str,
        req: &crate::MirrorPromoteRequest,
    ) -> Result<crate::MirrorView, ClientError> {
        self.json_within(
            Method::POST,
            &routes::fill(routes::NAMESPACE_MIRROR_PROMOTE, &[nqn, nsid]),
            Some(to_json(req)),
            std::time::Duration::from_secs(60),
        )
    }

    /// `PUT …/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` gets the limits `req`
    /// (replacing any it had; a key not given is unlimited).
    pub fn set_namespace_qos(
        &self,
        nqn: &str,
        nsid: &str,
        req: &crate::QosRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_QOS, &[nqn, nsid]),
            Some(to_json(req)),
        )
    }

    /// `DELETE …/namespaces/{nsid}/qos`: namespace `nsid` of `nqn` unlimited again.
    pub fn clear_namespace_qos(
        &self,
        nqn: &str,
        nsid: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_QOS, &[nqn, nsid]),
            None,
        )
    }

    /// `POST …/namespaces/{nsid}/hosts`: host `hostnqn` sees namespace `nsid` of `nqn` too.
    pub fn attach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        let body = to_json(&HostRequest {
            hostnqn: hostnqn.into(),
        });
        self.json(
            Method::POST,
            &routes::fill(routes::NAMESPACE_HOSTS, &[nqn, nsid]),
            Some(body),
        )
    }

    /// `DELETE …/namespaces/{nsid}/hosts/{hostnqn}`: host `hostnqn` no longer sees namespace
    /// `nsid` of `nqn`.
    pub fn detach_namespace_host(
        &self,
        nqn: &str,
        nsid: &str,
        hostnqn: &str,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::NAMESPACE_HOST, &[nqn, nsid, hostnqn]),
            None,
        )
    }

    /// Resize namespace `nsid` of `nqn`.
    pub fn resize_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        req: &ResizeRequest,
    ) -> Result<NamespaceChanged, ClientError> {
        self.json(
            Method::PUT,
            &routes::fill(routes::NAMESPACE_SIZE, &[nqn, nsid]),
            Some(to_json(req)),
        )
    }

    /// Start listening on a new address.
    pub fn add_listener(&self, req: &ListenerRequest) -> Result<ListenerView, ClientError> {
        self.json(Method::POST, routes::LISTENERS, Some(to_json(req)))
    }

    /// Stop listening on `address` (`ADDR:PORT`); with `disconnect`, also end the controllers
    /// that came in through it.
    pub fn remove_listener(
        &self,
        address: &str,
        disconnect: bool,
    ) -> Result<ListenerRemoved, ClientError> {
        let mut uri = routes::fill(routes::LISTENER, &[address]);
        if disconnect {
            uri.push_str("?disconnect=true");
        }
        self.json(Method::DELETE, &uri, None)
    }

    /// Set the ANA state of a group on a listener.
    pub fn set_ana(&self, req: &crate::AnaRequest) -> Result<crate::AnaChanged, ClientError> {
        self.json(Method::PUT, routes::ANA, Some(to_json(req)))
    }

    /// What is published over mDNS.
    pub fn mdns(&self) -> Result<crate::MdnsView, ClientError> {
        self.json(Method::GET, routes::MDNS, None)
    }

    /// Set the mDNS mode (`on`, `off` or `auto`).
    pub fn set_mdns(&self, req: &crate::MdnsRequest) -> Result<crate::MdnsView, ClientError> {
        self.json(Method::PUT, routes::MDNS, Some(to_json(req)))
    }

    /// The referrals served.
    pub fn referrals(&self) -> Result<crate::Referrals, ClientError> {
        self.json(Method::GET, routes::REFERRALS, None)
    }

    /// Refer hosts to the discovery service at `address` (`ADDR[:PORT]`, port 8009).
    pub fn add_referral(&self, address: &str) -> Result<crate::Referrals, ClientError> {
        let req = crate::ReferralRequest {
            address: address.to_string(),
        };
        self.json(Method::POST, routes::REFERRALS, Some(to_json(&req)))
    }

    /// Stop referring hosts to `address`.
    pub fn remove_referral(&self, address: &str) -> Result<crate::Referrals, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::REFERRAL, &[address]),
            None,
        )
    }

    /// The Central Discovery Controller and its members.
    pub fn cdc(&self) -> Result<crate::CdcView, ClientError> {
        self.json(Method::GET, routes::CDC, None)
    }

    /// Add a member (`ADDR[:PORT]`) to the Central Discovery Controller.
    pub fn add_cdc_member(&self, address: &str) -> Result<crate::CdcMemberView, ClientError> {
        let req = crate::CdcMemberRequest {
            address: address.to_string(),
        };
        self.json(Method::POST, routes::CDC_MEMBERS, Some(to_json(&req)))
    }

    /// Who may announce itself to the Central Discovery Controller.
    pub fn cdc_trusted(&self) -> Result<crate::CdcTrusted, ClientError> {
        self.json(Method::GET, routes::CDC_TRUSTED, None)
    }

    /// Replace who may announce itself to the Central Discovery Controller.
    pub fn set_cdc_trusted(&self, trusted: &[String]) -> Result<crate::CdcTrusted, ClientError> {
        let req = crate::CdcTrusted {
            trusted: trusted.to_vec(),
        };
        self.json(Method::PUT, routes::CDC_TRUSTED, Some(to_json(&req)))
    }

    /// Remove member `address` from the Central Discovery Controller.
    pub fn remove_cdc_member(&self, address: &str) -> Result<crate::CdcView, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::CDC_MEMBER, &[address]),
            None,
        )
    }

    /// The DIM registrations hosts made.
    pub fn registrations(&self) -> Result<Vec<crate::DimRegistrationView>, ClientError> {
        self.json(Method::GET, routes::REGISTRATIONS, None)
    }

    /// `POST /v1/subsystems/{nqn}/namespaces/{nsid}/snapshots`: snapshot a file namespace.
    pub fn snapshot_namespace(
        &self,
        nqn: &str,
        nsid: &str,
        name: &str,
    ) -> Result<crate::SnapshotView, ClientError> {
        let req = crate::SnapshotRequest {
            name: name.to_string(),
        };
        self.json_within(
            Method::POST,
            &routes::fill(routes::NAMESPACE_SNAPSHOTS, &[nqn, nsid]),
            Some(to_json(&req)),
            SNAPSHOT_TIMEOUT,
        )
    }

    /// `GET /v1/snapshots`: every snapshot.
    pub fn snapshots(&self) -> Result<Vec<crate::SnapshotView>, ClientError> {
        self.json(Method::GET, routes::SNAPSHOTS, None)
    }

    /// `DELETE /v1/snapshots/{name}`.
    pub fn delete_snapshot(&self, name: &str) -> Result<crate::SnapshotDeleted, ClientError> {
        self.json(
            Method::DELETE,
            &routes::fill(routes::SNAPSHOT, &[name]),
            None,
        )
    }

    /// `POST /v1/snapshots/{name}/clones`: a writable clone added as a namespace.
    pub fn clone_snapshot(
        &self,
        name: &str,
        req: &crate::CloneRequest,
    ) -> Result<crate::CloneMade, ClientError> {
        self.json_within(
            Method::POST,
            &routes::fill(routes::SNAPSHOT_CLONES, &[name]),
            Some(to_json(req)),
            SNAPSHOT_TIMEOUT,
        )
    }

    /// `GET /v1/pools`: every storage pool with its accounting.
    pub fn pools(&self) -> Result<Vec<crate::PoolView>, ClientError> {
        self.json(Method::GET, routes::POOLS, None)
    }

    /// Write the running configuration.
    pub fn save(&self, req: &SaveRequest) -> Result<Saved, ClientError> {
        self.json(Method::POST, routes::SAVE, Some(to_json(req)))
    }

    /// `PUT /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: set the host's DH-HMAC-CHAP keys on
    /// the subsystem.
    pub fn set_host_key(
        &self,
        nqn: &str,
        hostnqn: &str,
        req: &HostKeyRequest,
    ) -> Result<HostKeyView, ClientError> {
        let uri = routes::fill(routes::HOST_DHCHAP, &[nqn, hostnqn]);
        self.json(Method::PUT, &uri, Some(to_json(req)))
    }

    /// `DELETE /v1/subsystems/{nqn}/hosts/{hostnqn}/dhchap`: remove them.
    pub fn remove_host_key(&self, nqn: &str, hostnqn: &str) -> Result<HostKeyView, ClientError> {
        let uri = routes::fill(routes::HOST_DHCHAP, &[nqn, hostnqn]);
        self.json(Method::DELETE, &uri, None)
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Our request types serialise infallibly (strings and booleans only).
    serde_json::to_string(v).unwrap_or_default()
}
