//! Issue 35, round two of the CSI driver, through its gRPC interface: `ebof csi --controller`
//! served in this process on a Unix socket (`ebof_csi::server::serve`), a tonic client, and
//! fake boxes (`fakebox`: the management API on loopback, in memory).
//! - ControllerModifyVolume (`MODIFY_VOLUME`): the QoS keys changed live on the box (both
//!   copies of a replicated volume), everything checked before anything changes;
//! - clones (`CLONE_VOLUME`): a temporary snapshot of the source, cloned, grown, deleted; the
//!   clone holds what the source held when it was made, and outlives it;
//! - health (`GET_VOLUME`, `VOLUME_CONDITION`, `GET_SNAPSHOT`): ControllerGetVolume and
//!   ListVolumes say when the box does not answer, the namespace is missing, the pool is full,
//!   or a replicated volume runs on one copy.

mod fakebox;

use ebof_csi::names;
use ebof_csi::pb;
use ebof_csi::pb::controller_client::ControllerClient;
use ebof_csi::pb::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
use fakebox::FakeBox;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::Channel;

const GIB: u64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// Fake boxes and `ebof csi --controller` over them, until dropped. The fields drop in
/// order: the client and its runtime (which closes its connection) before the server, whose
/// graceful stop waits for its connections to close.
struct Driver {
    ctl: ControllerClient<Channel>,
    rt: tokio::runtime::Runtime,
    _server: Server,
    boxes: Vec<FakeBox>,
    _dir: tempfile::TempDir,
}

/// `ebof csi` on a thread of its own, stopped when dropped.
struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `n` boxes with pools of `pool` bytes (NVMe ports from `port`), and the driver.
fn start(n: usize, pool: u64, port: u16) -> Driver {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "fake-token\n").unwrap();
    let boxes: Vec<FakeBox> = (0..n)
        .map(|i| FakeBox::start(port + i as u16, pool))
        .collect();
    let mut file = String::new();
    for (i, b) in boxes.iter().enumerate() {
        file.push_str(&format!(
            "[[boxes]]\nname = \"box{i}\"\napi = \"{}\"\ntoken_file = \"token\"\n",
            b.api
        ));
    }
    let boxes_file = dir.path().join("boxes.toml");
    std::fs::write(&boxes_file, file).unwrap();
    let sock = dir.path().join("csi.sock");
    let opts = ebof_csi::server::Options {
        endpoint: format!("unix://{}", sock.display()),
        driver_name: ebof_csi::DRIVER_NAME.into(),
        boxes: Some(boxes_file),
        node: None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(ebof_csi::server::serve(opts, async {
            let _ = rx.await;
        }))
    });
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no CSI socket");
        assert!(!thread.is_finished(), "the driver stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ctl = ControllerClient::new(rt.block_on(channel(sock)));
    Driver {
        ctl,
        rt,
        _server: Server {
            stop: Some(tx),
            thread: Some(thread),
        },
        boxes,
        _dir: dir,
    }
}

/// A channel to the driver's socket. The socket file appears at bind, a moment before the
/// driver listens: a refused first connect is tried again for a while.
async fn channel(sock: PathBuf) -> Channel {
    let t0 = Instant::now();
    loop {
        let p = sock.clone();
        let r = tonic::transport::Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let p = p.clone();
                async move {
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                        tokio::net::UnixStream::connect(p).await?,
                    ))
                }
            }))
            .await;
        match r {
            Ok(c) => return c,
            Err(_) if t0.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("connect to the CSI socket: {e:?}"),
        }
    }
}

fn map(kv: &[(&str, &str)]) -> HashMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn create_req(name: &str, bytes: i64, params: &[(&str, &str)]) -> pb::CreateVolumeRequest {
    pb::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(pb::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![pb::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
        }],
        parameters: map(params),
        ..Default::default()
    }
}

fn clone_of(name: &str, bytes: i64, source: &str) -> pb::CreateVolumeRequest {
    let mut r = create_req(name, bytes, &[]);
    r.volume_content_source = Some(pb::VolumeContentSource {
        r#type: Some(pb::volume_content_source::Type::Volume(
            pb::volume_content_source::VolumeSource {
                volume_id: source.into(),
            },
        )),
    });
    r
}

impl Driver {
    fn create(&self, r: pb::CreateVolumeRequest) -> Result<pb::Volume, tonic::Status> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.create_volume(r))
            .map(|a| a.into_inner().volume.expect("a volume"))
    }

    fn modify(&self, id: &str, kv: &[(&str, &str)]) -> Result<(), tonic::Status> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(
                c.controller_modify_volume(pb::ControllerModifyVolumeRequest {
                    volume_id: id.into(),
                    mutable_parameters: map(kv),
                    ..Default::default()
                }),
            )
            .map(|_| ())
    }

    fn get(&self, id: &str) -> Result<pb::ControllerGetVolumeResponse, tonic::Status> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.controller_get_volume(pb::ControllerGetVolumeRequest {
                volume_id: id.into(),
            }))
            .map(|a| a.into_inner())
    }

    /// The condition ControllerGetVolume reports for `id`.
    fn condition(&self, id: &str) -> pb::VolumeCondition {
        self.get(id)
            .unwrap()
            .status
            .unwrap()
            .volume_condition
            .unwrap()
    }

    fn delete(&self, id: &str) -> Result<(), tonic::Status> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.delete_volume(pb::DeleteVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            }))
            .map(|_| ())
    }

    fn list(&self) -> Vec<pb::list_volumes_response::Entry> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.list_volumes(pb::ListVolumesRequest::default()))
            .unwrap()
            .into_inner()
            .entries
    }

    fn snapshot(&self, name: &str, source: &str) -> pb::Snapshot {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.create_snapshot(pb::CreateSnapshotRequest {
                source_volume_id: source.into(),
                name: name.into(),
                ..Default::default()
            }))
            .unwrap()
            .into_inner()
            .snapshot
            .unwrap()
    }

    fn get_snapshot(&self, id: &str) -> Result<pb::Snapshot, tonic::Status> {
        let mut c = self.ctl.clone();
        self.rt
            .block_on(c.get_snapshot(pb::GetSnapshotRequest {
                snapshot_id: id.into(),
                ..Default::default()
            }))
            .map(|a| a.into_inner().snapshot.unwrap())
    }

    /// The QoS PUTs the boxes got.
    fn qos_puts(&self) -> usize {
        self.boxes
            .iter()
            .flat_map(|b| b.log())
            .filter(|c| c.method == "PUT" && c.path.ends_with("/qos"))
            .count()
    }

    /// The box holding a complete copy of `id`.
    fn home(&self, id: &str) -> &FakeBox {
        self.boxes
            .iter()
            .find(|b| b.subsystem(id).is_some_and(|s| !s.namespaces.is_empty()))
            .expect("a box with the volume")
    }
}

#[test]
fn the_new_capabilities_are_advertised() {
    let d = start(1, GIB, 44300);
    let mut c = d.ctl.clone();
    let caps =
        d.rt.block_on(c.controller_get_capabilities(pb::ControllerGetCapabilitiesRequest {}))
            .unwrap()
            .into_inner();
    use pb::controller_service_capability::rpc::Type as T;
    let got: Vec<i32> = caps
        .capabilities
        .iter()
        .filter_map(|c| {
            c.r#type
                .as_ref()
                .map(|pb::controller_service_capability::Type::Rpc(r)| r.r#type)
        })
        .collect();
    for want in [
        T::CloneVolume,
        T::ModifyVolume,
        T::GetVolume,
        T::VolumeCondition,
        T::GetSnapshot,
        T::CreateDeleteVolume,
        T::ExpandVolume,
    ] {
        assert!(got.contains(&(want as i32)), "{want:?} missing: {got:?}");
    }
}

#[test]
fn modify_volume_changes_qos_live_and_refuses_bad_keys_without_a_change() {
    let d = start(1, GIB, 44310);
    let v = d
        .create(create_req("pvc-qos", 64 * MIB, &[("iops", "1000")]))
        .unwrap();
    let b = d.home(&v.volume_id);
    assert_eq!(b.qos(&v.volume_id).unwrap()["iops"], json!(1000));
    // A key given replaces its limit; the others stay.
    d.modify(&v.volume_id, &[("mbps", "50"), ("readIops", "300")])
        .unwrap();
    let q = b.qos(&v.volume_id).unwrap();
    assert_eq!(
        (&q["iops"], &q["mbps"], &q["read_iops"]),
        (&json!(1000), &json!(50), &json!(300))
    );
    // Lowered, then lifted ("0": unlimited); the same call twice is harmless.
    d.modify(&v.volume_id, &[("iops", "200")]).unwrap();
    assert_eq!(b.qos(&v.volume_id).unwrap()["iops"], json!(200));
    for _ in 0..2 {
        d.modify(
            &v.volume_id,
            &[("iops", "0"), ("mbps", "0"), ("read_iops", "0")],
        )
        .unwrap();
    }
    assert!(b.qos(&v.volume_id).is_none(), "{:?}", b.qos(&v.volume_id));
    d.modify(&v.volume_id, &[("writeMbps", "7")]).unwrap();
    // Bad input of every kind: INVALID_ARGUMENT, and the box not asked to change anything.
    let before = d.qos_puts();
    for bad in [
        &[("colour", "red")][..],
        &[("iops", "10"), ("pool", "other")],
        &[("auth", "none")],
        &[("replicas", "2")],
        &[("iops", "-1")],
        &[("iops", "fast")],
        &[("mbps", "99999999999999")],
    ] {
        let e = d.modify(&v.volume_id, bad).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e:?}");
    }
    // No parameter: nothing changes (what csi-sanity sends by default).
    d.modify(&v.volume_id, &[]).unwrap();
    assert_eq!(d.qos_puts(), before);
    assert_eq!(b.qos(&v.volume_id).unwrap()["write_mbps"], json!(7));
    // Which volume: required; unknown ones are NOT_FOUND.
    let e = d.modify("", &[("iops", "1")]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for id in [names::volume_nqn("pvc-nobody"), "not-a-volume".to_string()] {
        for kv in [&[("iops", "1")][..], &[]] {
            let e = d.modify(&id, kv).unwrap_err();
            assert_eq!(e.code(), Code::NotFound, "{id}: {e:?}");
        }
    }
    // A box that refuses the limits: INVALID_ARGUMENT naming it.
    b.fail_next("PUT", "/qos", "invalid-qos");
    let e = d.modify(&v.volume_id, &[("iops", "5")]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("box0"), "{e:?}");
    // A VolumeAttributesClass given at creation: its keys on top of the StorageClass's.
    let mut r = create_req("pvc-vac", 64 * MIB, &[("iops", "1000"), ("mbps", "10")]);
    r.mutable_parameters = map(&[("iops", "2000")]);
    let w = d.create(r).unwrap();
    let q = d.home(&w.volume_id).qos(&w.volume_id).unwrap();
    assert_eq!((&q["iops"], &q["mbps"]), (&json!(2000), &json!(10)));
    let mut r = create_req("pvc-vac-bad", 64 * MIB, &[]);
    r.mutable_parameters = map(&[("pool", "x")]);
    assert_eq!(d.create(r).unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn modify_volume_sets_both_copies_of_a_replicated_volume() {
    let d = start(2, GIB, 44320);
    let v = d
        .create(create_req("pvc-qos2", 64 * MIB, &[("replicas", "2")]))
        .unwrap();
    d.modify(&v.volume_id, &[("iops", "4000")]).unwrap();
    for b in &d.boxes {
        assert_eq!(b.qos(&v.volume_id).unwrap()["iops"], json!(4000));
    }
    // One box down: UNAVAILABLE, and nothing changed on the other.
    let secondary = d
        .boxes
        .iter()
        .position(|b| b.mirror(&v.volume_id).unwrap()["role"] == json!("secondary"))
        .unwrap();
    d.boxes[secondary].set_down(true);
    let e = d.modify(&v.volume_id, &[("iops", "10")]).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let primary = 1 - secondary;
    assert_eq!(
        d.boxes[primary].qos(&v.volume_id).unwrap()["iops"],
        json!(4000)
    );
    // Health: the volume runs on one copy.
    let c = d.condition(&v.volume_id);
    assert!(c.abnormal && c.message.contains("one copy"), "{c:?}");
    d.boxes[secondary].set_down(false);
    d.modify(&v.volume_id, &[("iops", "10")]).unwrap();
    for b in &d.boxes {
        assert_eq!(b.qos(&v.volume_id).unwrap()["iops"], json!(10));
    }
    assert!(!d.condition(&v.volume_id).abnormal);
}

#[test]
fn clones_hold_what_the_source_held_and_outlive_it() {
    let d = start(2, GIB, 44330);
    let src = d
        .create(create_req("pvc-src", 64 * MIB, &[("iops", "500")]))
        .unwrap();
    let home = d
        .boxes
        .iter()
        .position(|b| b.subsystem(&src.volume_id).is_some())
        .unwrap();
    d.boxes[home].write(&src.volume_id, "before the clone");
    // A larger clone: on the source's box, grown, the source's data, its own QoS.
    let mut r = clone_of("pvc-clone", 128 * MIB, &src.volume_id);
    r.parameters = map(&[("mbps", "20")]);
    let c = d.create(r.clone()).unwrap();
    assert_ne!(c.volume_id, src.volume_id);
    assert_eq!(c.capacity_bytes, 128 * MIB);
    let b = &d.boxes[home];
    assert!(
        b.subsystem(&c.volume_id).is_some(),
        "the clone is on the source's box"
    );
    assert_eq!(b.read(&c.volume_id).as_deref(), Some("before the clone"));
    assert_eq!(b.qos(&c.volume_id).unwrap()["mbps"], json!(20));
    match c.content_source.and_then(|s| s.r#type) {
        Some(pb::volume_content_source::Type::Volume(v)) => {
            assert_eq!(v.volume_id, src.volume_id)
        }
        other => panic!("content source {other:?}"),
    }
    // The temporary snapshot is gone, and was never a CSI snapshot.
    assert!(b.snapshots().is_empty(), "{:?}", b.snapshots());
    // Later writes to the source are not in the clone.
    b.write(&src.volume_id, "after the clone");
    assert_eq!(b.read(&c.volume_id).as_deref(), Some("before the clone"));
    // Retried with the same name: the same volume, nothing taken again.
    b.clear_log();
    let again = d.create(r).unwrap();
    assert_eq!(again.volume_id, c.volume_id);
    assert!(b.log().iter().all(|x| x.method == "GET"), "{:?}", b.log());
    // A smaller size asked than the source's: the source's size (the range allows it).
    let small = d
        .create(clone_of("pvc-clone-small", 16 * MIB, &src.volume_id))
        .unwrap();
    assert_eq!(small.capacity_bytes, 64 * MIB);
    // The clone outlives its source.
    d.delete(&src.volume_id).unwrap();
    let got = d.get(&c.volume_id).unwrap();
    assert_eq!(got.volume.unwrap().capacity_bytes, 128 * MIB);
    assert_eq!(b.read(&c.volume_id).as_deref(), Some("before the clone"));
    for id in [&c.volume_id, &small.volume_id] {
        d.delete(id).unwrap();
    }
    assert!(b.snapshots().is_empty());
}

#[test]
fn bad_clones_are_refused_and_leave_nothing() {
    let d = start(1, GIB, 44340);
    let src = d.create(create_req("pvc-src2", 64 * MIB, &[])).unwrap();
    let b = &d.boxes[0];
    let cases: Vec<(pb::CreateVolumeRequest, Code)> = vec![
        (
            clone_of("c1", 64 * MIB, &names::volume_nqn("pvc-gone")),
            Code::NotFound,
        ),
        (clone_of("c2", 64 * MIB, "not-a-volume"), Code::NotFound),
        (clone_of("c3", 64 * MIB, ""), Code::InvalidArgument),
        (
            {
                let mut r = clone_of("c4", 16 * MIB, &src.volume_id);
                r.capacity_range.as_mut().unwrap().limit_bytes = 32 * MIB;
                r
            },
            Code::OutOfRange,
        ),
        // Two copies on a fleet of one box: no second box to hold the secondary (as for any
        // `replicas: "2"` volume; a clone into two copies is made where there are two).
        (
            {
                let mut r = clone_of("c5", 64 * MIB, &src.volume_id);
                r.parameters = map(&[("replicas", "2")]);
                r
            },
            Code::ResourceExhausted,
        ),
    ];
    for (r, want) in cases {
        let name = r.name.clone();
        let e = d.create(r).unwrap_err();
        assert_eq!(e.code(), want, "{name}: {e:?}");
        assert!(b.subsystem(&names::volume_nqn(&name)).is_none(), "{name}");
        assert!(b.snapshots().is_empty(), "{name}: {:?}", b.snapshots());
    }
    // The clone refused by the box (its pool full): the attempt and its snapshot removed.
    b.fail_next("POST", "/clones", "pool-full");
    let e = d
        .create(clone_of("c6", 64 * MIB, &src.volume_id))
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(b.subsystem(&names::volume_nqn("c6")).is_none());
    assert!(b.snapshots().is_empty(), "{:?}", b.snapshots());
    // The source is untouched throughout.
    assert_eq!(d.list().len(), 1);
}

#[test]
fn volume_health_says_what_is_wrong() {
    let d = start(2, GIB, 44350);
    let v = d.create(create_req("pvc-health", 64 * MIB, &[])).unwrap();
    let home = d
        .boxes
        .iter()
        .position(|b| b.subsystem(&v.volume_id).is_some())
        .unwrap();
    let other = 1 - home;
    let got = d.get(&v.volume_id).unwrap();
    assert_eq!(got.volume.as_ref().unwrap().capacity_bytes, 64 * MIB);
    let c = got.status.unwrap().volume_condition.unwrap();
    assert!(!c.abnormal, "{c:?}");
    // Its pool's file system cannot hold the rest of the volume: abnormal, in lists too.
    d.boxes[home].set_fs_available(Some(4096));
    let c = d.condition(&v.volume_id);
    assert!(c.abnormal && c.message.contains("full"), "{c:?}");
    let listed = d.list();
    let lc = listed[0]
        .status
        .as_ref()
        .unwrap()
        .volume_condition
        .as_ref()
        .unwrap();
    assert!(lc.abnormal && lc.message.contains("full"), "{lc:?}");
    d.boxes[home].set_fs_available(None);
    assert!(
        !d.list()[0]
            .status
            .as_ref()
            .unwrap()
            .volume_condition
            .as_ref()
            .unwrap()
            .abnormal
    );
    // Another box down: the volume is fine.
    d.boxes[other].set_down(true);
    assert!(!d.condition(&v.volume_id).abnormal);
    d.boxes[other].set_down(false);
    // Its own box down: the volume ID with an abnormal condition naming the box.
    d.boxes[home].set_down(true);
    let got = d.get(&v.volume_id).unwrap();
    assert_eq!(got.volume.as_ref().unwrap().volume_id, v.volume_id);
    let c = got.status.unwrap().volume_condition.unwrap();
    assert!(
        c.abnormal && c.message.contains(&format!("box{home}")),
        "{c:?}"
    );
    d.boxes[home].set_down(false);
    // Its namespace removed behind the driver's back.
    d.boxes[home].forget_namespace(&v.volume_id);
    let c = d.condition(&v.volume_id);
    assert!(
        c.abnormal && c.message.contains("without its namespace"),
        "{c:?}"
    );
    // Unknown volumes, all boxes answering: NOT_FOUND; no ID: INVALID_ARGUMENT.
    for id in [names::volume_nqn("pvc-nobody"), "x".to_string()] {
        assert_eq!(d.get(&id).unwrap_err().code(), Code::NotFound, "{id}");
    }
    assert_eq!(d.get("").unwrap_err().code(), Code::InvalidArgument);
}

#[test]
fn get_snapshot_finds_snapshots_or_says_why_not() {
    let d = start(2, GIB, 44360);
    let v = d.create(create_req("pvc-snapped", 64 * MIB, &[])).unwrap();
    let s = d.snapshot("snap-1", &v.volume_id);
    let got = d.get_snapshot(&s.snapshot_id).unwrap();
    assert_eq!(got.snapshot_id, s.snapshot_id);
    assert_eq!(got.source_volume_id, v.volume_id);
    assert_eq!(got.size_bytes, 64 * MIB);
    assert!(got.ready_to_use);
    let missing = names::snapshot_name("snap-none");
    assert_eq!(d.get_snapshot(&missing).unwrap_err().code(), Code::NotFound);
    assert_eq!(
        d.get_snapshot("nightly").unwrap_err().code(),
        Code::NotFound
    );
    assert_eq!(
        d.get_snapshot("").unwrap_err().code(),
        Code::InvalidArgument
    );
    // On no box that answers while one does not: UNAVAILABLE.
    let holder = d
        .boxes
        .iter()
        .position(|b| b.snapshots().contains(&s.snapshot_id))
        .unwrap();
    d.boxes[holder].set_down(true);
    assert_eq!(
        d.get_snapshot(&s.snapshot_id).unwrap_err().code(),
        Code::Unavailable
    );
    // ListSnapshots: a lookup by ID goes on while another box is down; a whole list does not.
    let list = |id: &str| {
        let mut c = d.ctl.clone();
        d.rt.block_on(c.list_snapshots(pb::ListSnapshotsRequest {
            snapshot_id: id.into(),
            ..Default::default()
        }))
        .map(|a| a.into_inner().entries)
    };
    assert_eq!(
        list(&s.snapshot_id).unwrap_err().code(),
        Code::Unavailable,
        "its box is down"
    );
    d.boxes[holder].set_down(false);
    assert!(d.get_snapshot(&s.snapshot_id).is_ok());
    let other = 1 - holder;
    d.boxes[other].set_down(true);
    assert_eq!(list(&s.snapshot_id).unwrap().len(), 1);
    assert_eq!(list("").unwrap_err().code(), Code::Unavailable);
    assert_eq!(
        d.get_snapshot(&s.snapshot_id).unwrap().snapshot_id,
        s.snapshot_id
    );
    d.boxes[other].set_down(false);
    assert_eq!(list("").unwrap().len(), 1);
}

#[test]
fn delete_goes_on_when_only_a_box_without_the_volume_is_down() {
    let d = start(3, GIB, 44370);
    let v = d.create(create_req("pvc-del", 64 * MIB, &[])).unwrap();
    let home = d
        .boxes
        .iter()
        .position(|b| b.subsystem(&v.volume_id).is_some())
        .unwrap();
    let other = (home + 1) % 3;
    // A replicated volume, and a box holding neither of its copies.
    let r = d
        .create(create_req("pvc-del2", 64 * MIB, &[("replicas", "2")]))
        .unwrap();
    let copies: Vec<usize> = (0..3)
        .filter(|&i| d.boxes[i].subsystem(&r.volume_id).is_some())
        .collect();
    let spare = (0..3).find(|i| !copies.contains(i)).unwrap();
    // The volume's own box down: it might be there, UNAVAILABLE, nothing removed.
    d.boxes[home].set_down(true);
    let e = d.delete(&v.volume_id).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains(&format!("box{home}")), "{e:?}");
    d.boxes[home].set_down(false);
    // Another box down: the volume is whole where it is, so it goes.
    d.boxes[other].set_down(true);
    d.delete(&v.volume_id).unwrap();
    assert!(d.boxes[home].subsystem(&v.volume_id).is_none());
    d.boxes[other].set_down(false);
    // A replicated volume with one copy's box down: UNAVAILABLE, both copies stay.
    d.boxes[copies[0]].set_down(true);
    let e = d.delete(&r.volume_id).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    d.boxes[copies[0]].set_down(false);
    assert!(
        copies
            .iter()
            .all(|&i| d.boxes[i].subsystem(&r.volume_id).is_some())
    );
    // With only the spare box down, both copies go.
    d.boxes[spare].set_down(true);
    d.delete(&r.volume_id).unwrap();
    assert!(
        copies
            .iter()
            .all(|&i| d.boxes[i].subsystem(&r.volume_id).is_none())
    );
    d.boxes[spare].set_down(false);
    // Gone everywhere now: deleting again is OK.
    d.delete(&v.volume_id).unwrap();
}

/// Issue 35 item 6 (csi-sanity): a second ControllerPublishVolume to the same node with
/// `readonly` flipped is ALREADY_EXISTS; the same again is OK; the read-only record is no
/// node in the published list and goes with the node's unpublish.
#[test]
fn publish_with_readonly_flipped_is_already_exists() {
    let d = start(1, GIB, 44380);
    let v = d.create(create_req("pvc-ro", 64 * MIB, &[])).unwrap();
    let node = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
    let cap = create_req("x", 0, &[]).volume_capabilities.remove(0);
    let publish = |n: &str, readonly: bool| {
        let mut c = d.ctl.clone();
        d.rt.block_on(
            c.controller_publish_volume(pb::ControllerPublishVolumeRequest {
                volume_id: v.volume_id.clone(),
                node_id: n.into(),
                volume_capability: Some(cap.clone()),
                readonly,
                volume_context: v.volume_context.clone(),
                ..Default::default()
            }),
        )
    };
    let unpublish = |n: &str| {
        let mut c = d.ctl.clone();
        d.rt.block_on(
            c.controller_unpublish_volume(pb::ControllerUnpublishVolumeRequest {
                volume_id: v.volume_id.clone(),
                node_id: n.into(),
                ..Default::default()
            }),
        )
        .unwrap();
    };
    let hosts = || d.boxes[0].subsystem(&v.volume_id).unwrap().hosts;
    let published = || {
        d.get(&v.volume_id)
            .unwrap()
            .status
            .unwrap()
            .published_node_ids
    };
    // Read-write, then read-write again: OK; read-only: ALREADY_EXISTS.
    publish(node, false).unwrap();
    publish(node, false).unwrap();
    let e = publish(node, true).unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("read-write"), "{e:?}");
    assert_eq!(hosts(), [node]);
    unpublish(node);
    // Read-only, then read-only again: OK; read-write: ALREADY_EXISTS.
    publish(node, true).unwrap();
    publish(node, true).unwrap();
    let e = publish(node, false).unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("read-only"), "{e:?}");
    assert_eq!(hosts().len(), 2, "the node and its read-only marker");
    assert_eq!(published(), [node], "the marker is no node");
    assert_eq!(
        d.list()[0].status.as_ref().unwrap().published_node_ids,
        [node]
    );
    // The marker is no node one may publish to, and goes with the node.
    let marker = hosts().into_iter().find(|h| h != node).unwrap();
    assert_eq!(publish(&marker, false).unwrap_err().code(), Code::NotFound);
    unpublish(node);
    assert!(hosts().is_empty(), "{:?}", hosts());
    // Published read-write again after that: no marker left to contradict it.
    publish(node, false).unwrap();
    assert_eq!(hosts(), [node]);
}

/// Issue 35 item 5: a box's token file is read again when it changes (replaced, as a
/// Kubernetes Secret's symlink swap does, or rewritten in place): a rotated token needs no
/// restart; until the file changes, a box that wants another token says to check it.
#[test]
fn a_rotated_token_is_used_without_a_restart() {
    let d = start(1, GIB, 44390);
    let file = d._dir.path().join("token");
    d.boxes[0].set_token(Some("fake-token"));
    d.create(create_req("pvc-tok1", 64 * MIB, &[])).unwrap();
    // The box takes a new token; the file still holds the old one.
    d.boxes[0].set_token(Some("rotated-token-2"));
    let e = d.create(create_req("pvc-tok2", 64 * MIB, &[])).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("token file"), "{e:?}");
    // The file replaced (a new inode): the next call uses it.
    let new = d._dir.path().join("token.new");
    std::fs::write(&new, "rotated-token-2\n").unwrap();
    std::fs::rename(&new, &file).unwrap();
    d.create(create_req("pvc-tok2", 64 * MIB, &[])).unwrap();
    // Rewritten in place: used too.
    d.boxes[0].set_token(Some("rotated-token-three"));
    std::fs::write(&file, "rotated-token-three\n").unwrap();
    d.create(create_req("pvc-tok3", 64 * MIB, &[])).unwrap();
    // A file that holds no token: the last token stays in use.
    std::fs::write(&file, "\n").unwrap();
    d.create(create_req("pvc-tok4", 64 * MIB, &[])).unwrap();
}

/// Issue 35 item 5: with a box down, CreateVolume goes on for names whose home box (the
/// rendezvous hash of name and box over the boxes that fit) answers, and is UNAVAILABLE
/// naming the home box for the others; a volume already made is found where it is.
#[test]
fn create_goes_on_when_the_home_box_answers() {
    let d = start(3, GIB, 44400);
    let before = d.create(create_req("pvc-before", 16 * MIB, &[])).unwrap();
    let on = d
        .boxes
        .iter()
        .position(|b| b.subsystem(&before.volume_id).is_some())
        .unwrap();
    let down = (on + 1) % 3;
    d.boxes[down].set_down(true);
    // Made before: found on its box whatever its home.
    let again = d.create(create_req("pvc-before", 16 * MIB, &[])).unwrap();
    assert_eq!(again.volume_id, before.volume_id);
    let (mut made, mut refused) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let name = format!("pvc-home-{i}");
        match d.create(create_req(&name, 16 * MIB, &[])) {
            Ok(v) => made.push((name, v.volume_id)),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                assert!(
                    e.message().contains(&format!("home box box{down}")),
                    "{e:?}"
                );
                refused.push(name);
            }
        }
    }
    assert!(
        !made.is_empty() && !refused.is_empty(),
        "{made:?} {refused:?}"
    );
    for (name, id) in &made {
        assert!(d.boxes[down].subsystem(id).is_none());
        // A retry while the box is down: the same volume, on the same box.
        let holder = |id: &str| {
            d.boxes
                .iter()
                .position(|b| b.subsystem(id).is_some())
                .unwrap()
        };
        let at = holder(id);
        assert_eq!(
            d.create(create_req(name, 16 * MIB, &[])).unwrap().volume_id,
            *id
        );
        assert_eq!(holder(id), at);
    }
    // Replicated volumes still need every box.
    let e = d
        .create(create_req("pvc-home-r", 16 * MIB, &[("replicas", "2")]))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // The box back: everything converges; the refused names are made; each volume is once.
    d.boxes[down].set_down(false);
    for name in &refused {
        d.create(create_req(name, 16 * MIB, &[])).unwrap();
    }
    for (name, id) in &made {
        assert_eq!(
            d.create(create_req(name, 16 * MIB, &[])).unwrap().volume_id,
            *id
        );
        let copies = d.boxes.iter().filter(|b| b.subsystem(id).is_some()).count();
        assert_eq!(copies, 1, "{name}");
    }
    assert_eq!(d.list().len(), 1 + made.len() + refused.len());
}

/// Issue 35 item 5: the placement and the rule for a box that does not answer agree. A volume
/// made while every box answered (where there was most room) whose box then stops answering
/// is not made a second time elsewhere by a retry of its CreateVolume (the CO retries until
/// it succeeds): the retry is UNAVAILABLE naming that box, and once the box is back it finds
/// the volume there, once.
#[test]
fn a_retry_while_the_volume_s_box_is_down_makes_no_second_volume() {
    let d = start(2, GIB, 44420);
    for i in 0..8 {
        let name = format!("pvc-twice-{i}");
        let v = d.create(create_req(&name, 16 * MIB, &[])).unwrap();
        let on = d
            .boxes
            .iter()
            .position(|b| b.subsystem(&v.volume_id).is_some())
            .unwrap();
        d.boxes[on].set_down(true);
        match d.create(create_req(&name, 16 * MIB, &[])) {
            Ok(w) => panic!(
                "{name} made again while its box box{on} is down: {:?}",
                w.volume_context.get("box")
            ),
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                assert!(e.message().contains(&format!("box{on}")), "{e:?}");
            }
        }
        d.boxes[on].set_down(false);
        let again = d.create(create_req(&name, 16 * MIB, &[])).unwrap();
        assert_eq!(again.volume_id, v.volume_id);
        let copies = d
            .boxes
            .iter()
            .filter(|b| b.subsystem(&v.volume_id).is_some())
            .count();
        assert_eq!(copies, 1, "{name}");
    }
}

/// A box the controller has not read since it started may hold anything: while it does not
/// answer, CreateVolume of a volume of one copy is UNAVAILABLE naming it, whatever the name.
#[test]
fn a_box_never_read_blocks_create_until_it_answers() {
    let d = start(2, GIB, 44430);
    d.boxes[1].set_down(true);
    for i in 0..4 {
        let e = d
            .create(create_req(&format!("pvc-unread-{i}"), 16 * MIB, &[]))
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert!(e.message().contains("box1"), "{e:?}");
    }
    d.boxes[1].set_down(false);
    for i in 0..4 {
        d.create(create_req(&format!("pvc-unread-{i}"), 16 * MIB, &[]))
            .unwrap();
    }
    assert_eq!(d.list().len(), 4);
}

/// Issue 35 item 5, ListVolumes with boxes down: UNAVAILABLE naming every box that does not
/// answer (a list without their volumes would tell the external-attacher that their
/// attachments are gone, and it would publish them again: ADR 0023); whole again once they
/// answer. ListSnapshots alike.
#[test]
fn list_volumes_names_every_box_that_does_not_answer() {
    let d = start(3, GIB, 44440);
    for i in 0..3 {
        d.create(create_req(&format!("pvc-list-{i}"), 16 * MIB, &[]))
            .unwrap();
    }
    let list = || {
        let mut c = d.ctl.clone();
        d.rt.block_on(c.list_volumes(pb::ListVolumesRequest::default()))
            .map(|a| a.into_inner().entries)
    };
    let snaps = || {
        let mut c = d.ctl.clone();
        d.rt.block_on(c.list_snapshots(pb::ListSnapshotsRequest::default()))
            .map(|a| a.into_inner().entries)
    };
    d.boxes[0].set_down(true);
    d.boxes[2].set_down(true);
    for e in [list().unwrap_err(), snaps().unwrap_err()] {
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        for want in ["box0", "box2", "2 of 3"] {
            assert!(e.message().contains(want), "{want}: {e:?}");
        }
        assert!(!e.message().contains("box1"), "{e:?}");
    }
    d.boxes[0].set_down(false);
    let e = list().unwrap_err();
    assert!(
        e.message().contains("box2") && !e.message().contains("box0"),
        "{e:?}"
    );
    d.boxes[2].set_down(false);
    assert_eq!(list().unwrap().len(), 3);
    assert!(snaps().unwrap().is_empty());
}

#[test]
fn encrypted_volumes_go_only_to_encrypted_pools() {
    let d = start(2, GIB, 44560);
    // No encrypted pool anywhere: a valid request the fleet cannot place (RESOURCE_EXHAUSTED,
    // as for a `pool` no box has), nothing made.
    let e = d
        .create(create_req("enc-0", 64 * MIB, &[("encrypted", "true")]))
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("encrypted pool"), "{e:?}");
    for b in &d.boxes {
        assert!(b.subsystem(&names::volume_nqn("enc-0")).is_none());
    }
    // A value other than "true"/"false": INVALID_ARGUMENT.
    let e = d
        .create(create_req("enc-1", 64 * MIB, &[("encrypted", "yes")]))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // One box's pool encrypted: every encrypted volume lands there, whatever its name.
    d.boxes[1].set_pool_encrypted(true);
    for i in 0..4 {
        let name = format!("enc-{}", i + 2);
        let v = d
            .create(create_req(&name, 64 * MIB, &[("encrypted", "true")]))
            .unwrap();
        assert!(d.boxes[1].subsystem(&v.volume_id).is_some(), "{name}");
        assert!(d.boxes[0].subsystem(&v.volume_id).is_none(), "{name}");
    }
}
