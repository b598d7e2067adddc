//! Replicated volumes (issue 34, StorageClass parameter `replicas: "2"`) through the Controller
//! service against fake boxes (`fakebox`: the management API on loopback, in memory): the two
//! copies placed on boxes of different zones where there are, on two boxes of one zone where
//! there are not, refused where two boxes cannot be had; each box asked for the right
//! `mirror`; a half-created volume completed by the next CreateVolume or removed by
//! DeleteVolume; both copies deleted, grown, published and unpublished; snapshots on the
//! primary.

mod fakebox;

use ebof_csi::controller::Controller;
use ebof_csi::pb;
use ebof_csi::pb::controller_server::Controller as _;
use ebof_csi::pb::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
use fakebox::FakeBox;
use serde_json::json;
use tonic::{Code, Request};

const GIB: u64 = 1 << 30;
const NODE: &str = "nqn.2014-08.org.nvmexpress:uuid:0c5ea000-0000-4000-8000-00000000000a";

struct Fleet {
    _dir: tempfile::TempDir,
    boxes: Vec<FakeBox>,
    ctl: Controller,
    rt: tokio::runtime::Runtime,
}

/// Boxes with these zones and pool sizes, and a controller over them (`witness`: the box
/// whose listener the boxes file names as the witness).
fn fleet(spec: &[(Option<&str>, u64)], witness: Option<usize>) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "fake-token\n").unwrap();
    let boxes: Vec<FakeBox> = spec
        .iter()
        .enumerate()
        .map(|(i, (_, pool))| FakeBox::start(44200 + i as u16, *pool))
        .collect();
    let mut file = String::new();
    if let Some(w) = witness {
        file.push_str(&format!("witness = \"{}\"\n", boxes[w].listener));
    }
    for (i, (zone, _)) in spec.iter().enumerate() {
        file.push_str(&format!(
            "[[boxes]]\nname = \"box{i}\"\napi = \"{}\"\ntoken_file = \"token\"\n",
            boxes[i].api
        ));
        if let Some(z) = zone {
            file.push_str(&format!("zone = \"{z}\"\n"));
        }
    }
    let path = dir.path().join("boxes.toml");
    std::fs::write(&path, file).unwrap();
    let ctl = Controller::from_fleet(ebof_csi::boxes::load_fleet(&path).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    Fleet {
        _dir: dir,
        boxes,
        ctl,
        rt,
    }
}

fn cap() -> pb::VolumeCapability {
    pb::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

fn create_req(name: &str, params: &[(&str, &str)]) -> pb::CreateVolumeRequest {
    pb::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(pb::CapacityRange {
            required_bytes: 64 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![cap()],
        parameters: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

fn topo(zones: &[&str]) -> Vec<pb::Topology> {
    zones
        .iter()
        .map(|z| pb::Topology {
            segments: [(ebof_csi::ZONE_KEY.to_string(), z.to_string())].into(),
        })
        .collect()
}

impl Fleet {
    fn create(&self, r: pb::CreateVolumeRequest) -> Result<pb::Volume, tonic::Status> {
        self.rt
            .block_on(self.ctl.create_volume(Request::new(r)))
            .map(|a| a.into_inner().volume.unwrap())
    }

    fn create2(&self, name: &str) -> Result<pb::Volume, tonic::Status> {
        self.create(create_req(name, &[("replicas", "2")]))
    }

    fn delete(&self, id: &str) -> Result<(), tonic::Status> {
        self.rt
            .block_on(
                self.ctl
                    .delete_volume(Request::new(pb::DeleteVolumeRequest {
                        volume_id: id.into(),
                        ..Default::default()
                    })),
            )
            .map(|_| ())
    }

    /// The boxes holding a complete copy of `nqn`, with the role each was made with.
    fn copies(&self, nqn: &str) -> Vec<(usize, String)> {
        self.boxes
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.subsystem(nqn)
                    .is_some_and(|s| s.namespaces.iter().any(|n| n.nsid == 1))
            })
            .map(|(i, b)| {
                let role = b
                    .mirror(nqn)
                    .map(|m| m["role"].as_str().unwrap().to_string())
                    .unwrap_or_default();
                (i, role)
            })
            .collect()
    }

    /// The boxes with any subsystem `nqn`.
    fn holders(&self, nqn: &str) -> Vec<usize> {
        (0..self.boxes.len())
            .filter(|&i| self.boxes[i].subsystem(nqn).is_some())
            .collect()
    }

    /// Box `p`'s primary and box `s`'s secondary of `nqn` name each other, and agree.
    fn assert_pair(&self, nqn: &str, p: usize, s: usize) {
        let (pb, sb) = (&self.boxes[p], &self.boxes[s]);
        let pm = pb.mirror(nqn).expect("primary's mirror");
        let sm = sb.mirror(nqn).expect("secondary's mirror");
        assert_eq!(pm["role"], json!("primary"));
        assert_eq!(pm["peer"], json!(sb.listener));
        assert_eq!(sm["role"], json!("secondary"));
        assert_eq!(sm["peer"], json!(pb.listener));
        let (pn, sn) = (
            pb.subsystem(nqn).unwrap().namespaces[0].clone(),
            sb.subsystem(nqn).unwrap().namespaces[0].clone(),
        );
        assert_eq!((pn.nsid, pn.size, &pn.uuid), (sn.nsid, sn.size, &sn.uuid));
        assert_eq!(pn.nsid, 1);
    }
}

/// The volume's context listeners, as the node reads them.
fn listeners(v: &pb::Volume) -> Vec<String> {
    v.volume_context["listeners"]
        .split(',')
        .map(|s| s.trim_start_matches("tcp:").to_string())
        .collect()
}

fn zones_of(v: &pb::Volume) -> Vec<String> {
    let mut z: Vec<String> = v
        .accessible_topology
        .iter()
        .map(|t| t.segments[ebof_csi::ZONE_KEY].clone())
        .collect();
    z.sort();
    z
}

#[test]
fn two_copies_go_to_boxes_in_different_zones_and_name_each_other() {
    // Two boxes in zone a with the most room, one in zone b: one copy must go to b.
    let f = fleet(
        &[(Some("a"), 8 * GIB), (Some("a"), 8 * GIB), (Some("b"), GIB)],
        None,
    );
    let v = f.create2("pvc-zones").unwrap();
    let copies = f.copies(&v.volume_id);
    assert_eq!(copies.len(), 2, "{copies:?}");
    let p = copies.iter().find(|c| c.1 == "primary").unwrap().0;
    let s = copies.iter().find(|c| c.1 == "secondary").unwrap().0;
    assert!(p == 2 || s == 2, "one copy in zone b: {copies:?}");
    f.assert_pair(&v.volume_id, p, s);
    // Every path of both boxes, both zones, and the copies said.
    let mut l = listeners(&v);
    l.sort();
    let mut want = vec![f.boxes[p].listener.clone(), f.boxes[s].listener.clone()];
    want.sort();
    assert_eq!(l, want);
    assert_eq!(zones_of(&v), ["a", "b"]);
    assert_eq!(v.volume_context["replicas"], "2");
    assert_eq!(
        v.volume_context["box"],
        format!("box{p},box{s}"),
        "the primary first"
    );
    assert_eq!(v.capacity_bytes, 64 << 20);
    // The same name again: the same volume, nothing added.
    for b in &f.boxes {
        b.clear_log();
    }
    let again = f.create2("pvc-zones").unwrap();
    assert_eq!(again.volume_id, v.volume_id);
    assert_eq!(listeners(&again).len(), 2);
    for b in &f.boxes {
        assert!(b.log().iter().all(|c| c.method == "GET"), "{:?}", b.log());
    }
    // The same name with one copy asked: ALREADY_EXISTS.
    let e = f.create(create_req("pvc-zones", &[])).unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    // One copy stays one copy, unmirrored.
    let one = f.create(create_req("pvc-one", &[])).unwrap();
    assert_eq!(f.holders(&one.volume_id).len(), 1);
    assert!(!one.volume_context.contains_key("replicas"));
    assert!(f.boxes.iter().all(|b| b.mirror(&one.volume_id).is_none()));
}

#[test]
fn one_zone_is_used_when_no_pair_spans_zones_and_requisite_zones_bound_both() {
    let f = fleet(
        &[(Some("a"), GIB), (Some("a"), GIB), (Some("b"), GIB)],
        None,
    );
    // Requisite zone a only: both copies in a.
    let mut r = create_req("pvc-in-a", &[("replicas", "2")]);
    r.accessibility_requirements = Some(pb::TopologyRequirement {
        requisite: topo(&["a"]),
        preferred: vec![],
    });
    let v = f.create(r).unwrap();
    let mut held = f.holders(&v.volume_id);
    held.sort();
    assert_eq!(held, [0, 1]);
    assert_eq!(zones_of(&v), ["a"]);
    // No zones at all: two distinct boxes.
    let g = fleet(&[(None, GIB), (None, GIB)], None);
    let v = g.create2("pvc-nozone").unwrap();
    assert_eq!(g.copies(&v.volume_id).len(), 2);
    assert!(v.accessible_topology.is_empty());
}

#[test]
fn two_boxes_that_fit_or_nothing() {
    let f = fleet(
        &[(Some("a"), GIB), (Some("b"), 32 << 20), (Some("b"), GIB)],
        None,
    );
    // Requisite zone a has one box: RESOURCE_EXHAUSTED, nothing left behind.
    let mut r = create_req("pvc-a-only", &[("replicas", "2")]);
    r.accessibility_requirements = Some(pb::TopologyRequirement {
        requisite: topo(&["a"]),
        preferred: vec![],
    });
    let e = f.create(r).unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("two boxes"), "{e:?}");
    assert!(
        f.holders(&ebof_csi::names::volume_nqn("pvc-a-only"))
            .is_empty()
    );
    // Too big for box 1: boxes 0 and 2.
    let v = f.create2("pvc-fit").unwrap();
    let mut held = f.holders(&v.volume_id);
    held.sort();
    assert_eq!(held, [0, 2]);
    // Bigger than every box but one: refused.
    let mut r = create_req("pvc-huge", &[("replicas", "2")]);
    r.capacity_range = Some(pb::CapacityRange {
        required_bytes: (GIB - (32 << 20)) as i64,
        limit_bytes: 0,
    });
    assert_eq!(f.create(r).unwrap_err().code(), Code::ResourceExhausted);
    // One box: never two copies on it.
    let one = fleet(&[(None, GIB)], None);
    assert_eq!(
        one.create2("pvc-lonely").unwrap_err().code(),
        Code::ResourceExhausted
    );
    // Not a number of copies: INVALID_ARGUMENT.
    for bad in ["3", "0", "two"] {
        let e = f
            .create(create_req("pvc-bad", &[("replicas", bad)]))
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
    }
    // A snapshot no box has, restored into two copies: NOT_FOUND, nothing made (a real one
    // is restored: `a_snapshot_is_restored_into_two_copies_grown_to_the_size_asked`).
    let mut r = create_req("pvc-restore", &[("replicas", "2")]);
    r.volume_content_source = Some(pb::VolumeContentSource {
        r#type: Some(pb::volume_content_source::Type::Snapshot(
            pb::volume_content_source::SnapshotSource {
                snapshot_id: "csi-x-0123456789abcdef".into(),
            },
        )),
    });
    assert_eq!(f.create(r).unwrap_err().code(), Code::NotFound);
    assert!(
        f.holders(&ebof_csi::names::volume_nqn("pvc-restore"))
            .is_empty()
    );
}

#[test]
fn no_copy_on_the_witness_box_while_another_pair_fits() {
    // Box 0 has the most room and is the witness: the pair is boxes 1 and 2.
    let f = fleet(
        &[(Some("a"), 8 * GIB), (Some("b"), GIB), (Some("c"), GIB)],
        Some(0),
    );
    for i in 0..4 {
        let v = f.create2(&format!("pvc-w{i}")).unwrap();
        let mut held = f.holders(&v.volume_id);
        held.sort();
        assert_eq!(held, [1, 2]);
    }
    // With only the witness's box to pair with, it is used (and the log says so).
    let g = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], Some(0));
    let v = g.create2("pvc-w").unwrap();
    assert_eq!(g.copies(&v.volume_id).len(), 2);
}

#[test]
fn delete_removes_both_copies_the_secondary_first() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-del").unwrap();
    assert_eq!(f.holders(&v.volume_id).len(), 2);
    f.delete(&v.volume_id).unwrap();
    assert!(f.holders(&v.volume_id).is_empty());
    // The order: the primary's box refuses the delete; the secondary is gone already.
    let w = f.create2("pvc-del2").unwrap();
    let p = f
        .copies(&w.volume_id)
        .iter()
        .find(|c| c.1 == "primary")
        .unwrap()
        .0;
    f.boxes[p].fail_next("DELETE", "", "internal");
    assert!(f.delete(&w.volume_id).is_err());
    assert_eq!(f.holders(&w.volume_id), [p], "the secondary went first");
    // A primary alone: the next delete removes it.
    f.delete(&w.volume_id).unwrap();
    assert!(f.holders(&w.volume_id).is_empty());
    // Deleting again: nothing, no error.
    f.delete(&w.volume_id).unwrap();
}

#[test]
fn a_half_created_volume_is_completed_by_the_next_create() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let nqn = ebof_csi::names::volume_nqn("pvc-half");
    // The secondary's namespace refused once (a crash between steps 3 and 4, as the boxes
    // see it): the call fails, the primary stays, the secondary's subsystem is unfinished.
    for b in &f.boxes {
        b.fail_next_if("POST", "/namespaces", "\"secondary\"", "backend-failed");
    }
    let e = f.create2("pvc-half").unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    let copies = f.copies(&nqn);
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0].1, "primary");
    let p = copies[0].0;
    assert_eq!(
        f.holders(&nqn).len(),
        2,
        "the secondary's subsystem, unfinished"
    );
    // The retry finishes it, with the pair the primary names.
    for b in &f.boxes {
        b.clear_fail();
    }
    let v = f.create2("pvc-half").unwrap();
    f.assert_pair(&nqn, p, 1 - p);
    assert_eq!(listeners(&v).len(), 2);

    // A primary alone (the secondary's box lost it): the next create makes the secondary.
    f.boxes[1 - p].forget(&nqn);
    let v = f.create2("pvc-half").unwrap();
    f.assert_pair(&nqn, p, 1 - p);
    assert_eq!(listeners(&v).len(), 2);

    // A half-created volume deleted: both go.
    let other = ebof_csi::names::volume_nqn("pvc-half2");
    for b in &f.boxes {
        b.fail_next_if("POST", "/namespaces", "\"secondary\"", "backend-failed");
    }
    assert!(f.create2("pvc-half2").is_err());
    for b in &f.boxes {
        b.clear_fail();
    }
    assert_eq!(f.holders(&other).len(), 2);
    f.delete(&other).unwrap();
    assert!(f.holders(&other).is_empty());
}

#[test]
fn a_secondary_alone_is_not_given_a_new_primary() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-orphan").unwrap();
    let p = f
        .copies(&v.volume_id)
        .iter()
        .find(|c| c.1 == "primary")
        .unwrap()
        .0;
    f.boxes[p].forget(&v.volume_id);
    let e = f.create2("pvc-orphan").unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("promote"), "{e:?}");
    assert!(
        f.boxes[p].subsystem(&v.volume_id).is_none(),
        "no primary made"
    );
    // A promoted secondary is a primary: its peer gets a new secondary.
    f.boxes[1 - p].set_role(&v.volume_id, "primary");
    f.create2("pvc-orphan").unwrap();
    f.assert_pair(&v.volume_id, 1 - p, p);
}

#[test]
fn expand_grows_the_secondary_then_the_primary() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-grow").unwrap();
    let copies = f.copies(&v.volume_id);
    let p = copies.iter().find(|c| c.1 == "primary").unwrap().0;
    let s = 1 - p;
    for b in &f.boxes {
        b.clear_log();
    }
    // The primary refuses: the secondary has grown already (it goes first), the call fails.
    f.boxes[p].fail_next("PUT", "/size", "backend-failed");
    let expand = |bytes: i64| {
        f.rt.block_on(f.ctl.controller_expand_volume(Request::new(
            pb::ControllerExpandVolumeRequest {
                volume_id: v.volume_id.clone(),
                capacity_range: Some(pb::CapacityRange {
                    required_bytes: bytes,
                    limit_bytes: 0,
                }),
                volume_capability: Some(cap()),
                ..Default::default()
            },
        )))
    };
    assert!(expand(128 << 20).is_err());
    let size = |i: usize| f.boxes[i].subsystem(&v.volume_id).unwrap().namespaces[0].size;
    assert_eq!((size(s), size(p)), (128 << 20, 64 << 20));
    // Retried: both at the size; the secondary is not asked again.
    f.boxes[s].clear_log();
    let a = expand(128 << 20).unwrap().into_inner();
    assert_eq!(a.capacity_bytes, 128 << 20);
    assert!(a.node_expansion_required);
    assert_eq!((size(s), size(p)), (128 << 20, 128 << 20));
    assert!(f.boxes[s].log().iter().all(|c| c.method == "GET"));
    // A box of the pair down: UNAVAILABLE, nothing grown.
    f.boxes[s].set_down(true);
    let e = expand(256 << 20).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    f.boxes[s].set_down(false);
    assert_eq!(size(p), 128 << 20);
}

#[test]
fn publish_admits_the_node_on_both_boxes_with_one_key() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-pub").unwrap();
    let publish = || {
        f.rt.block_on(f.ctl.controller_publish_volume(Request::new(
            pb::ControllerPublishVolumeRequest {
                volume_id: v.volume_id.clone(),
                node_id: NODE.into(),
                volume_capability: Some(cap()),
                volume_context: v.volume_context.clone(),
                ..Default::default()
            },
        )))
    };
    let ctx = publish().unwrap().into_inner().publish_context;
    assert!(ctx.contains_key("dhchapSecret"));
    let mut keys = Vec::new();
    for b in &f.boxes {
        assert_eq!(b.subsystem(&v.volume_id).unwrap().hosts, [NODE]);
        let put = b
            .log()
            .into_iter()
            .find(|c| c.method == "PUT" && c.path.ends_with("/dhchap"))
            .expect("the node's keys on every box");
        keys.push(put.body["dhchap_key"].clone());
    }
    assert_eq!(keys[0], keys[1], "one key pair for both boxes");
    assert_eq!(keys[0], json!(ctx["dhchapSecret"]));
    // Published again: the same answer.
    assert_eq!(publish().unwrap().into_inner().publish_context, ctx);
    // Unpublished: off both boxes.
    f.rt.block_on(f.ctl.controller_unpublish_volume(Request::new(
        pb::ControllerUnpublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: NODE.into(),
            ..Default::default()
        },
    )))
    .unwrap();
    for b in &f.boxes {
        assert!(b.subsystem(&v.volume_id).unwrap().hosts.is_empty());
    }
    // One box down: published on the other (a pod starts when a box is lost).
    let p = f
        .copies(&v.volume_id)
        .iter()
        .find(|c| c.1 == "primary")
        .unwrap()
        .0;
    f.boxes[p].set_down(true);
    let again = publish().unwrap().into_inner().publish_context;
    assert_eq!(again, ctx, "the same keys whichever box answers");
    f.boxes[p].set_down(false);
    assert_eq!(
        f.boxes[1 - p].subsystem(&v.volume_id).unwrap().hosts,
        [NODE]
    );
    assert!(f.boxes[p].subsystem(&v.volume_id).unwrap().hosts.is_empty());
    // Listed with every path of both, once.
    let list =
        f.rt.block_on(
            f.ctl
                .list_volumes(Request::new(pb::ListVolumesRequest::default())),
        )
        .unwrap()
        .into_inner();
    assert_eq!(list.entries.len(), 1);
    let lv = list.entries[0].volume.clone().unwrap();
    assert_eq!(listeners(&lv).len(), 2);
}

#[test]
fn a_snapshot_is_taken_on_the_primary_only() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-snap").unwrap();
    let p = f
        .copies(&v.volume_id)
        .iter()
        .find(|c| c.1 == "primary")
        .unwrap()
        .0;
    let s =
        f.rt.block_on(
            f.ctl
                .create_snapshot(Request::new(pb::CreateSnapshotRequest {
                    source_volume_id: v.volume_id.clone(),
                    name: "snap-1".into(),
                    ..Default::default()
                })),
        )
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(s.source_volume_id, v.volume_id);
    assert_eq!(f.boxes[p].snapshots(), std::slice::from_ref(&s.snapshot_id));
    assert!(f.boxes[1 - p].snapshots().is_empty());
}

/// The primary takes a replicated volume's snapshot on both copies (ADR 0028 decision 15);
/// while they are not in sync it refuses with `snapshot-busy`: UNAVAILABLE, retried.
#[test]
fn a_snapshot_of_copies_not_in_sync_is_retried() {
    let f = fleet(&[(Some("a"), GIB), (Some("b"), GIB)], None);
    let v = f.create2("pvc-snap-busy").unwrap();
    for b in &f.boxes {
        b.fail_next("POST", "/snapshots", "snapshot-busy");
    }
    let e =
        f.rt.block_on(
            f.ctl
                .create_snapshot(Request::new(pb::CreateSnapshotRequest {
                    source_volume_id: v.volume_id.clone(),
                    name: "snap-busy".into(),
                    ..Default::default()
                })),
        )
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
}

#[test]
fn two_controllers_racing_on_one_name_make_one_pair() {
    let f = fleet(
        &[
            (Some("a"), 4 * GIB),
            (Some("b"), 4 * GIB),
            (Some("c"), 4 * GIB),
        ],
        None,
    );
    // The rival sees the same boxes in other zones, so it places the pairs otherwise.
    let path = f._dir.path().join("rival.toml");
    let text = std::fs::read_to_string(f._dir.path().join("boxes.toml"))
        .unwrap()
        .replace("zone = \"a\"", "zone = \"x\"")
        .replace("zone = \"b\"", "zone = \"x\"");
    std::fs::write(&path, text).unwrap();
    let rival = std::sync::Arc::new(Controller::from_fleet(
        ebof_csi::boxes::load_fleet(&path).unwrap(),
    ));
    let ours = std::sync::Arc::new(f.ctl.clone());
    for i in 0..12 {
        let name = format!("pvc-race-{i}");
        let results: Vec<Result<pb::Volume, tonic::Status>> = f.rt.block_on(async {
            let mut tasks = Vec::new();
            for c in [ours.clone(), rival.clone()] {
                let r = create_req(&name, &[("replicas", "2")]);
                tasks.push(tokio::spawn(async move {
                    c.create_volume(Request::new(r))
                        .await
                        .map(|a| a.into_inner().volume.unwrap())
                }));
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        let nqn = ebof_csi::names::volume_nqn(&name);
        for r in &results {
            match r {
                Ok(v) => {
                    assert_eq!(v.volume_id, nqn);
                    assert_eq!(listeners(v).len(), 2, "{v:?}");
                }
                Err(e) => assert_eq!(e.code(), Code::Aborted, "{e:?}"),
            }
        }
        // Whatever the interleaving, a retry answers the one pair, whole; every answer
        // given named its paths.
        let v = f.create2(&name).unwrap();
        let mut want = listeners(&v);
        want.sort();
        for r in results.iter().flatten() {
            let mut got = listeners(r);
            got.sort();
            assert_eq!(got, want, "{i}");
        }
        let copies = f.copies(&nqn);
        assert_eq!(copies.len(), 2, "{i}: {copies:?}");
        assert_eq!(f.holders(&nqn).len(), 2, "{i}: nothing left elsewhere");
        let p = copies.iter().find(|c| c.1 == "primary").unwrap().0;
        let s = copies.iter().find(|c| c.1 == "secondary").unwrap().0;
        f.assert_pair(&nqn, p, s);
        assert_eq!(listeners(&v).len(), 2);
    }
}

#[test]
fn capacity_for_two_copies_is_what_a_second_box_can_hold() {
    let f = fleet(
        &[(Some("a"), 4 * GIB), (Some("b"), 2 * GIB), (Some("c"), GIB)],
        None,
    );
    let cap = |params: &[(&str, &str)]| {
        f.rt.block_on(
            f.ctl.get_capacity(Request::new(pb::GetCapacityRequest {
                parameters: params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            })),
        )
        .unwrap()
        .into_inner()
    };
    let one = cap(&[]);
    assert_eq!(one.available_capacity, (7 * GIB) as i64);
    assert_eq!(one.maximum_volume_size, Some((4 * GIB) as i64));
    let two = cap(&[("replicas", "2")]);
    assert_eq!(two.available_capacity, (7 * GIB / 2) as i64);
    assert_eq!(two.maximum_volume_size, Some((2 * GIB) as i64));
}

#[test]
fn encrypted_copies_go_to_two_encrypted_pools_or_nowhere() {
    // Zones a, a, b; only box 0 and box 1 have encrypted pools: both copies there, although
    // box 2 is the other zone (encryption is a requirement, zones a preference).
    let f = fleet(
        &[
            (Some("a"), 8 * GIB),
            (Some("a"), 8 * GIB),
            (Some("b"), 8 * GIB),
        ],
        None,
    );
    let enc = [("replicas", "2"), ("encrypted", "true")];
    // One encrypted pool in the fleet: a pair cannot be had, nothing is made.
    f.boxes[0].set_pool_encrypted(true);
    let e = f.create(create_req("pvc-enc-one", &enc)).unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let nqn = ebof_csi::names::volume_nqn("pvc-enc-one");
    assert!(
        f.holders(&nqn).is_empty(),
        "nothing made: {:?}",
        f.holders(&nqn)
    );
    f.boxes[1].set_pool_encrypted(true);
    let v = f.create(create_req("pvc-enc", &enc)).unwrap();
    let mut held = f.holders(&v.volume_id);
    held.sort();
    assert_eq!(held, [0, 1], "both copies in the encrypted pools");
    let copies = f.copies(&v.volume_id);
    let p = copies.iter().find(|c| c.1 == "primary").unwrap().0;
    let s = copies.iter().find(|c| c.1 == "secondary").unwrap().0;
    f.assert_pair(&v.volume_id, p, s);
    assert_eq!(v.volume_context["replicas"], "2");
}

#[test]
fn a_snapshot_is_restored_into_two_copies_grown_to_the_size_asked() {
    let f = fleet(
        &[
            (Some("a"), 8 * GIB),
            (Some("b"), 8 * GIB),
            (Some("b"), 8 * GIB),
        ],
        None,
    );
    let v = f.create2("pvc-src").unwrap();
    let src = f.copies(&v.volume_id);
    let p = src.iter().find(|c| c.1 == "primary").unwrap().0;
    f.boxes[p].write(&v.volume_id, "written before the snapshot");
    let snap =
        f.rt.block_on(
            f.ctl
                .create_snapshot(Request::new(pb::CreateSnapshotRequest {
                    source_volume_id: v.volume_id.clone(),
                    name: "snap-r".into(),
                    ..Default::default()
                })),
        )
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    let mut r = create_req("pvc-restored", &[("replicas", "2")]);
    r.capacity_range = Some(pb::CapacityRange {
        required_bytes: 128 << 20,
        limit_bytes: 0,
    });
    r.volume_content_source = Some(pb::VolumeContentSource {
        r#type: Some(pb::volume_content_source::Type::Snapshot(
            pb::volume_content_source::SnapshotSource {
                snapshot_id: snap.snapshot_id.clone(),
            },
        )),
    });
    let w = f.create(r.clone()).unwrap();
    let copies = f.copies(&w.volume_id);
    assert_eq!(copies.len(), 2, "{copies:?}");
    let wp = copies.iter().find(|c| c.1 == "primary").unwrap().0;
    let ws = copies.iter().find(|c| c.1 == "secondary").unwrap().0;
    assert_eq!(wp, p, "the primary is cloned on the snapshot's box");
    f.assert_pair(&w.volume_id, wp, ws);
    assert_eq!(
        f.boxes[wp].read(&w.volume_id).as_deref(),
        Some("written before the snapshot"),
        "the primary holds the snapshot's data (the box copies it to the secondary)"
    );
    // Grown to the size asked, the secondary first.
    assert_eq!(w.capacity_bytes, 128 << 20);
    for b in [wp, ws] {
        let calls = f.boxes[b].log();
        let grow = calls
            .iter()
            .filter(|c| c.method == "PUT" && c.path.ends_with("/size"))
            .count();
        assert_eq!(grow, 1, "box {b} grown once: {calls:?}");
    }
    assert!(w.content_source.is_some());
    // Asked again: the same volume.
    assert_eq!(f.create(r).unwrap().volume_id, w.volume_id);
}
