#!/usr/bin/env python3
"""CSI calls from Python gRPC (grpcio from PyPI) with its default channel options.

grpc-core >= 1.57 sends the percent-encoded socket path as :authority on a Unix socket; this is
the client that found every RPC refused (issue 35). The stubs are generated here from the repo's
csi.proto with grpcio-tools (csi_pb2.py, csi_pb2_grpc.py), as any CSI client project does.

    grpcio_check.py --endpoint unix:///PATH --proto crates/ebof-csi/proto/csi.proto --out DIR
                    [--driver NAME] [--volume NAME]

Identity (GetPluginInfo, GetPluginCapabilities, Probe) and ControllerGetCapabilities need no box;
with --volume, also CreateVolume (twice: idempotent), ListVolumes, ControllerPublishVolume and
ControllerUnpublishVolume, DeleteVolume (twice), on the boxes the driver serves. One line per
check, then 'N passed, N failed'; exits 1 on any failure.
"""

import argparse
import os
import sys


def generate(proto, out):
    """csi_pb2.py and csi_pb2_grpc.py from csi.proto, with grpcio-tools' own well-known types."""
    import grpc_tools
    from grpc_tools import protoc

    os.makedirs(out, exist_ok=True)
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main([
        "grpc_tools.protoc",
        f"-I{os.path.dirname(os.path.abspath(proto))}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.abspath(proto),
    ])
    if rc != 0:
        sys.exit(f"grpc_tools.protoc failed ({rc}) on {proto}")
    sys.path.insert(0, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--driver", default="csi.ebof.io")
    ap.add_argument("--volume")
    a = ap.parse_args()
    generate(a.proto, a.out)

    import grpc
    import csi_pb2 as pb
    import csi_pb2_grpc as rpc

    print(f"grpcio {grpc.__version__}, endpoint {a.endpoint}, default channel options")
    channel = grpc.insecure_channel(a.endpoint)
    identity = rpc.IdentityStub(channel)
    controller = rpc.ControllerStub(channel)
    results = []

    def check(name, call, verify=lambda r: None):
        try:
            resp = call()
            why = verify(resp)
        except grpc.RpcError as e:
            why = f"{e.code().name}: {e.details()}"
        results.append(why is None)
        print(f"{'ok  ' if why is None else 'FAIL'} {name}" + ("" if why is None else f": {why}"))
        return resp if why is None else None

    t = 30

    def named(r):
        return None if r.name == a.driver else f"name {r.name!r}, want {a.driver!r}"

    check("Identity.GetPluginInfo", lambda: identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=t), named)
    check(
        "Identity.GetPluginCapabilities",
        lambda: identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest(), timeout=t),
        lambda r: None if r.capabilities else "no capabilities",
    )
    check(
        "Identity.Probe",
        lambda: identity.Probe(pb.ProbeRequest(), timeout=t),
        lambda r: None if not r.HasField("ready") or r.ready.value else "not ready",
    )
    rpcs = set()

    def caps(r):
        rpcs.update(c.rpc.type for c in r.capabilities)
        return None if r.capabilities else "no capabilities"

    check(
        "Controller.ControllerGetCapabilities",
        lambda: controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest(), timeout=t),
        caps,
    )
    if a.volume:
        volume_checks(a.volume, check, controller, pb, t)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


def volume_checks(name, check, controller, pb, t):
    """A volume's life on the boxes, through the same channel."""
    cap = pb.VolumeCapability(
        mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
        access_mode=pb.VolumeCapability.AccessMode(
            mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
        ),
    )
    req = pb.CreateVolumeRequest(
        name=name,
        capacity_range=pb.CapacityRange(required_bytes=64 << 20),
        volume_capabilities=[cap],
    )
    made = check(
        "Controller.CreateVolume",
        lambda: controller.CreateVolume(req, timeout=t),
        lambda r: None if r.volume.capacity_bytes >= 64 << 20 else f"capacity {r.volume.capacity_bytes}",
    )
    if made is None:
        return
    vid = made.volume.volume_id
    check(
        "Controller.CreateVolume again (idempotent)",
        lambda: controller.CreateVolume(req, timeout=t),
        lambda r: None if r.volume.volume_id == vid else f"another volume {r.volume.volume_id}",
    )
    check(
        "Controller.ListVolumes",
        lambda: controller.ListVolumes(pb.ListVolumesRequest(), timeout=t),
        lambda r: None if any(e.volume.volume_id == vid for e in r.entries) else f"{vid} not listed",
    )
    node = "nqn.2014-08.org.nvmexpress:uuid:0c5ea000-0000-4000-8000-0000000000a1"
    check(
        "Controller.ControllerPublishVolume",
        lambda: controller.ControllerPublishVolume(
            pb.ControllerPublishVolumeRequest(volume_id=vid, node_id=node, volume_capability=cap),
            timeout=t,
        ),
    )
    check(
        "Controller.ControllerUnpublishVolume",
        lambda: controller.ControllerUnpublishVolume(
            pb.ControllerUnpublishVolumeRequest(volume_id=vid, node_id=node), timeout=t
        ),
    )
    for what in ("Controller.DeleteVolume", "Controller.DeleteVolume again (idempotent)"):
        check(what, lambda: controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vid), timeout=t))


if __name__ == "__main__":
    sys.exit(main())
