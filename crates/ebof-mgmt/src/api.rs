//! The management API's vocabulary, shared by the server and the client: routes, request and
//! response bodies, and [`ApiError`] with its stable [`codes`]. It lives in the `ebof-api`
//! crate (which the clients depend on without linking the server) and is re-exported here at
//! its old paths.

pub use ebof_api::{
    AllowAnyHostRequest, AnaChanged, AnaRequest, AnaView, ApiError, CdcMemberRequest,
    CdcMemberView, CdcTrusted, CdcView, CloneMade, CloneRequest, ControllerView, DimEntryView,
    DimRegistrationView, Disconnected, FsSpaceView, HostRequest, LatencyPercentiles,
    ListenerRemoveQuery, ListenerRemoved, ListenerRequest, ListenerView, MdnsRecordView,
    MdnsRequest, MdnsView, MirrorPromoteRequest, MirrorView, NamespaceChanged,
    NamespaceHostsRequest, NamespaceRemoved, NamespaceRequest, NamespaceStats, NamespaceView,
    PREFIX, PoolView, QosRequest, QosView, ReferralRequest, Referrals, RegistrantView,
    ReservationView, ResizeRequest, SaveRequest, Saved, SnapshotDeleted, SnapshotOrigin,
    SnapshotRequest, SnapshotView, State, Stats, SubsystemRemoved, SubsystemRequest, SubsystemView,
    codes, hex, percent_encode, routes, uuid_string,
};
