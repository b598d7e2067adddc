#!/usr/bin/python3
"""A small CSI v1 client for the interop scenarios (linux-csi): gRPC over the driver's Unix socket.

The messages come from `csi_pb2.py`, generated from crates/ebof-csi/proto/csi.proto with
`protoc --python_out` (Debian's protobuf-compiler); the stubs are made here from the proto's
service descriptors (`channel.unary_unary('/csi.v1.Node/NodeStageVolume', ...)`), so neither
grpc_tools nor generated *_pb2_grpc.py files are needed. Requests and responses are JSON objects
with the proto's field names (snake_case), enums by name (e.g. "SINGLE_NODE_WRITER").

Library:
    c = Client("unix:///tmp/csi.sock")
    c.call("Node", "NodeStageVolume", {"volume_id": ...})  -> dict (raises RpcError on failure)

CLI:
    csi_client.py [--endpoint E] call SERVICE METHOD [JSON]
        one call; prints the response as one JSON line; a failed call prints
        {"code": "NOT_FOUND", "details": "..."} on stdout and exits 1
    csi_client.py [--endpoint E] serve
        many calls through one process (the Python/gRPC start-up is paid once, which matters in a
        TCG guest, where every program started costs a fraction of a second): reads one request a
        line, `SERVICE METHOD JSON` (JSON optional) or `FLAT PATH` (a JSON file to read, e.g. an
        `ebof ctl --json` answer), and answers each with
            OK N              then the response as one JSON line, then N lines `KEY<TAB>VALUE`:
                              the response flattened (keys are paths like volume.volume_id or
                              capabilities.0.rpc.type; strings raw with newlines as \n, numbers
                              and booleans as JSON, empty objects/lists as {} / [])
            ERR CODE          then the details on one line
        so that a shell reads it into an associative array without starting a program (jq).
Environment: CSI_ENDPOINT (default unix:///tmp/csi.sock), CSI_TIMEOUT (seconds per call,
default 120), CSI_PB_DIR (where csi_pb2.py is; default this file's directory).
"""

import json
import os
import sys

sys.path.insert(0, os.environ.get("CSI_PB_DIR") or os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import csi_pb2  # noqa: E402

PACKAGE = "csi.v1"


class RpcError(Exception):
    """A call that did not succeed: the gRPC status code name and its details."""

    def __init__(self, code, details):
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class Client:
    """CSI Identity, Controller and Node calls on one gRPC channel."""

    def __init__(self, endpoint=None, timeout=None):
        self.endpoint = endpoint or os.environ.get("CSI_ENDPOINT", "unix:///tmp/csi.sock")
        self.timeout = float(timeout or os.environ.get("CSI_TIMEOUT", "120"))
        self.channel = grpc.insecure_channel(self.endpoint)
        self._stubs = {}

    def _stub(self, service, method):
        key = (service, method)
        if key not in self._stubs:
            svc = csi_pb2.DESCRIPTOR.services_by_name.get(service)
            if svc is None:
                raise RpcError("INVALID_ARGUMENT", f"no CSI service {service!r} in csi.proto")
            m = svc.methods_by_name.get(method)
            if m is None:
                raise RpcError("INVALID_ARGUMENT", f"no method {method!r} in service {service}")
            req = getattr(csi_pb2, m.input_type.name)
            resp = getattr(csi_pb2, m.output_type.name)
            call = self.channel.unary_unary(
                f"/{PACKAGE}.{service}/{method}",
                request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString,
            )
            self._stubs[key] = (req, call)
        return self._stubs[key]

    def call(self, service, method, request=None):
        """Call SERVICE.METHOD with the request given as a dict; the response as a dict."""
        req_type, call = self._stub(service, method)
        try:
            req = json_format.ParseDict(request or {}, req_type())
        except json_format.ParseError as e:
            raise RpcError("CLIENT_BAD_REQUEST", str(e)) from None
        try:
            resp = call(req, timeout=self.timeout, wait_for_ready=True)
        except grpc.RpcError as e:
            raise RpcError(e.code().name, e.details() or "") from None
        return to_dict(resp)


def to_dict(msg):
    """A message as a dict with proto field names and default values printed: protobuf < 5.26
    calls that `including_default_value_fields`, later ones
    `always_print_fields_with_no_presence` (Debian's python3-protobuf and PyPI's)."""
    try:
        return json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:
        return json_format.MessageToDict(
            msg, preserving_proto_field_name=True, including_default_value_fields=True
        )


def flatten(value, prefix=""):
    """(key, text) pairs of a JSON value: dotted paths, list indices as path elements."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            yield from flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            yield from flatten(v, f"{prefix}.{i}" if prefix else str(i))
    elif isinstance(value, str):
        yield prefix, value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    else:
        yield prefix, json.dumps(value)


def _one_line(text):
    return " ".join(str(text).split("\n"))


def _serve(client):
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        parts = line.split(None, 2)
        try:
            if parts[0] == "FLAT" and len(parts) >= 2:
                path = line.split(None, 1)[1]
                try:
                    with open(path, encoding="utf-8") as f:
                        resp = json.load(f)
                except (OSError, ValueError) as e:
                    raise RpcError("CLIENT_BAD_FILE", f"{path}: {e}") from None
            elif len(parts) < 2:
                raise RpcError("CLIENT_BAD_REQUEST", f"want SERVICE METHOD [JSON], got {line!r}")
            else:
                try:
                    req = json.loads(parts[2]) if len(parts) > 2 else {}
                except json.JSONDecodeError as e:
                    raise RpcError("CLIENT_BAD_REQUEST", f"request JSON: {e}") from None
                resp = client.call(parts[0], parts[1], req)
            flat = [(k, v) for k, v in flatten(resp) if k]  # an empty answer: none
            out = [f"OK {len(flat)}", json.dumps(resp, sort_keys=True)]
            out += [f"{k}\t{v}" for k, v in flat]
        except RpcError as e:
            out = [f"ERR {e.code}", _one_line(e.details)]
        print("\n".join(out), flush=True)


def main(argv):
    args = list(argv)
    endpoint = None
    if args[:1] == ["--endpoint"] and len(args) > 1:
        endpoint = args[1]
        args = args[2:]
    client = Client(endpoint)
    if args[:1] == ["serve"]:
        _serve(client)
        return 0
    if args[:1] == ["call"] and len(args) in (3, 4):
        try:
            resp = client.call(args[1], args[2], json.loads(args[3]) if len(args) == 4 else {})
        except RpcError as e:
            print(json.dumps({"code": e.code, "details": e.details}))
            return 1
        print(json.dumps(resp, sort_keys=True))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
