#!/usr/bin/env python3
"""Check the Kubernetes manifests in deploy/kubernetes/ without a Kubernetes.

No Kubernetes, kubeconform or kubectl can be installed on the machines the tests run on, so this
is the check: every YAML document is parsed and validated against a small strict schema of the
kinds the deployment uses (unknown fields are errors, as with `kubectl apply --validate=strict`),
then cross-checked as a whole:

- every apiVersion/kind pair is known; metadata.name is a valid name; namespaced objects live in
  the ebof-csi namespace (the examples in examples/ in theirs), cluster-scoped ones have none;
  no two objects share kind/namespace/name;
- containers have a name and a pinned image; every volumeMount/volumeDevice names a volume of
  the pod and every volume is used; Deployment/DaemonSet selectors match their pod labels;
- every serviceAccountName exists; every RoleBinding/ClusterRoleBinding names an existing role
  and existing service accounts; each sidecar's service account can do what that sidecar needs
  (creating PVs, patching VolumeAttachment status, ...) and take its leader-election lease;
- the `ebof csi` arguments parse as the driver's command line (--endpoint, --controller |
  --node, --boxes, --driver-name, --node-id, --zone); the CSI socket agrees between the driver's
  --endpoint, every sidecar's --csi-address (the same volume, the same path) and the
  registrar's --kubelet-registration-path (the plugin directory's hostPath); the CSIDriver's
  name equals the StorageClass provisioner, the VolumeSnapshotClass driver, the --driver-name
  and the plugin directory's name;
- the controller's --boxes file is in its mounted Secret, parses as TOML, and every box's
  token_file is a key of that Secret; the node plugin is privileged, on the host network, and
  has /dev, /sys, /lib/modules, /etc/nvme and kubelet's directory with Bidirectional
  propagation; StorageClass parameters are the driver's;
- kustomization.yaml lists every manifest file, and only existing ones.

Then the negative self-test: each of a list of mutations is applied to a copy of the
manifests, and the check must fail on the copy with the expected message; a mutation that
passes fails the whole run.

Usage: tests/deploy/check_manifests.py [DIR] [--no-self-test]   (DIR: default deploy/kubernetes)
Exit status 0 when everything holds, 1 otherwise (every problem is printed).
"""

import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile


def ensure_yaml():
    """Import PyYAML, installing python3-yaml with apt (as root) or re-running under
    /usr/bin/python3 (where Debian's package lands) when this interpreter lacks it."""
    try:
        import yaml  # noqa: F401

        return
    except ImportError:
        pass
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("check_manifests: apt-get install python3-yaml", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "python3-yaml"]
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, stdout=subprocess.DEVNULL)
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    try:
        import yaml  # noqa: F401

        return
    except ImportError:
        pass
    system = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system):
        os.execv(system, [system] + sys.argv)
    sys.exit("check_manifests: FAILED: PyYAML is not available (apt-get install python3-yaml)")


ensure_yaml()
import yaml  # noqa: E402

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    tomllib = None

NAMESPACE = "ebof-csi"
DRIVER_DEFAULT = "csi.ebof.io"
KUBELET_DIR = "/var/lib/kubelet"
SIDECAR_PREFIX = "registry.k8s.io/sig-storage/"

# ---------------------------------------------------------------------------------------------
# the schema: (apiVersion, kind) -> namespaced?, and a strict field schema per kind
#
# A schema is a dict {field: spec}, where a field written "name!" is required; a spec is a type
# name ("str", "int", "bool", "quantity", "map" = str -> str, "any"), a ("enum", {...}) tuple, a
# list [spec], or a nested dict schema. Unknown fields are errors.

KINDS = {
    ("v1", "Namespace"): False,
    ("v1", "ServiceAccount"): True,
    ("v1", "Secret"): True,
    ("v1", "ConfigMap"): True,
    ("v1", "PersistentVolumeClaim"): True,
    ("v1", "Pod"): True,
    ("apps/v1", "Deployment"): True,
    ("apps/v1", "StatefulSet"): True,
    ("apps/v1", "DaemonSet"): True,
    ("storage.k8s.io/v1", "CSIDriver"): False,
    ("storage.k8s.io/v1", "StorageClass"): False,
    ("storage.k8s.io/v1", "VolumeAttributesClass"): False,
    ("snapshot.storage.k8s.io/v1", "VolumeSnapshotClass"): False,
    ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"): True,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): False,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): False,
    ("rbac.authorization.k8s.io/v1", "Role"): True,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): True,
}

META = {"name!": "str", "namespace": "str", "labels": "map", "annotations": "map"}
TEMPLATE_META = {"labels": "map", "annotations": "map"}
ENV_VAR = {
    "name!": "str",
    "value": "str",
    "valueFrom": {
        "fieldRef": {"fieldPath!": "str", "apiVersion": "str"},
        "secretKeyRef": {"name!": "str", "key!": "str", "optional": "bool"},
        "configMapKeyRef": {"name!": "str", "key!": "str", "optional": "bool"},
    },
}
PROBE = {
    "httpGet": {"path": "str", "port!": "any", "scheme": ("enum", {"HTTP", "HTTPS"})},
    "exec": {"command!": ["str"]},
    "grpc": {"port!": "int", "service": "str"},
    "initialDelaySeconds": "int",
    "periodSeconds": "int",
    "timeoutSeconds": "int",
    "failureThreshold": "int",
    "successThreshold": "int",
}
CONTAINER = {
    "name!": "str",
    "image!": "str",
    "imagePullPolicy": ("enum", {"Always", "IfNotPresent", "Never"}),
    "command": ["str"],
    "args": ["str"],
    "env": [ENV_VAR],
    "ports": [{"name": "str", "containerPort!": "int", "protocol": ("enum", {"TCP", "UDP"})}],
    "volumeMounts": [
        {
            "name!": "str",
            "mountPath!": "str",
            "readOnly": "bool",
            "subPath": "str",
            "mountPropagation": ("enum", {"None", "HostToContainer", "Bidirectional"}),
        }
    ],
    "volumeDevices": [{"name!": "str", "devicePath!": "str"}],
    "securityContext": {
        "privileged": "bool",
        "allowPrivilegeEscalation": "bool",
        "readOnlyRootFilesystem": "bool",
        "runAsUser": "int",
        "runAsNonRoot": "bool",
        "capabilities": {"add": ["str"], "drop": ["str"]},
    },
    "livenessProbe": PROBE,
    "readinessProbe": PROBE,
    "startupProbe": PROBE,
    "resources": {"requests": "map", "limits": "map"},
}
VOLUME = {
    "name!": "str",
    "emptyDir": {"medium": "str", "sizeLimit": "quantity"},
    "hostPath": {
        "path!": "str",
        "type": (
            "enum",
            {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"},
        ),
    },
    "secret": {
        "secretName!": "str",
        "defaultMode": "int",
        "optional": "bool",
        "items": [{"key!": "str", "path!": "str", "mode": "int"}],
    },
    "configMap": {
        "name!": "str",
        "defaultMode": "int",
        "optional": "bool",
        "items": [{"key!": "str", "path!": "str", "mode": "int"}],
    },
    "persistentVolumeClaim": {"claimName!": "str", "readOnly": "bool"},
}
POD_SPEC = {
    "containers!": [CONTAINER],
    "initContainers": [CONTAINER],
    "volumes": [VOLUME],
    "serviceAccountName": "str",
    "automountServiceAccountToken": "bool",
    "priorityClassName": "str",
    "hostNetwork": "bool",
    "hostPID": "bool",
    "dnsPolicy": ("enum", {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}),
    "nodeSelector": "map",
    "tolerations": [
        {
            "key": "str",
            "operator": ("enum", {"Exists", "Equal"}),
            "value": "str",
            "effect": ("enum", {"NoSchedule", "PreferNoSchedule", "NoExecute"}),
            "tolerationSeconds": "int",
        }
    ],
    "restartPolicy": ("enum", {"Always", "OnFailure", "Never"}),
    "terminationGracePeriodSeconds": "int",
    "affinity": "any",
}
POD_TEMPLATE = {"metadata!": TEMPLATE_META, "spec!": POD_SPEC}
SELECTOR = {"matchLabels!": "map"}
POLICY_RULE = {"apiGroups!": ["str"], "resources!": ["str"], "verbs!": ["str"], "resourceNames": ["str"]}
SUBJECT = {
    "kind!": ("enum", {"ServiceAccount", "User", "Group"}),
    "name!": "str",
    "namespace": "str",
    "apiGroup": "str",
}
ROLE_REF = {
    "kind!": ("enum", {"Role", "ClusterRole"}),
    "name!": "str",
    "apiGroup!": ("enum", {"rbac.authorization.k8s.io"}),
}
ACCESS_MODES = ("enum", {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"})

SCHEMAS = {
    "Namespace": {},
    "ServiceAccount": {"automountServiceAccountToken": "bool"},
    "Secret": {"type": "str", "stringData": "map", "data": "map", "immutable": "bool"},
    "ConfigMap": {"data": "map", "immutable": "bool"},
    "PersistentVolumeClaim": {
        "spec!": {
            "accessModes!": [ACCESS_MODES],
            "storageClassName": "str",
            "volumeMode": ("enum", {"Filesystem", "Block"}),
            "resources!": {"requests!": {"storage!": "quantity"}, "limits": {"storage": "quantity"}},
            "dataSource": {"apiGroup": "str", "kind!": "str", "name!": "str"},
            "volumeAttributesClassName": "str",
        }
    },
    "Pod": {"spec!": POD_SPEC},
    "Deployment": {
        "spec!": {
            "replicas": "int",
            "selector!": SELECTOR,
            "template!": POD_TEMPLATE,
            "strategy": {"type": ("enum", {"RollingUpdate", "Recreate"}), "rollingUpdate": "any"},
        }
    },
    "StatefulSet": {
        "spec!": {"replicas": "int", "serviceName": "str", "selector!": SELECTOR, "template!": POD_TEMPLATE}
    },
    "DaemonSet": {
        "spec!": {
            "selector!": SELECTOR,
            "template!": POD_TEMPLATE,
            "updateStrategy": {
                "type": ("enum", {"RollingUpdate", "OnDelete"}),
                "rollingUpdate": {"maxUnavailable": "any", "maxSurge": "any"},
            },
        }
    },
    "CSIDriver": {
        "spec!": {
            "attachRequired": "bool",
            "podInfoOnMount": "bool",
            "volumeLifecycleModes": [("enum", {"Persistent", "Ephemeral"})],
            "fsGroupPolicy": ("enum", {"None", "File", "ReadWriteOnceWithFSType"}),
            "storageCapacity": "bool",
            "requiresRepublish": "bool",
            "seLinuxMount": "bool",
            "tokenRequests": "any",
        }
    },
    "StorageClass": {
        "provisioner!": "str",
        "parameters": "map",
        "reclaimPolicy": ("enum", {"Delete", "Retain"}),
        "volumeBindingMode": ("enum", {"Immediate", "WaitForFirstConsumer"}),
        "allowVolumeExpansion": "bool",
        "mountOptions": ["str"],
        "allowedTopologies": [{"matchLabelExpressions!": [{"key!": "str", "values!": ["str"]}]}],
    },
    "VolumeAttributesClass": {"driverName!": "str", "parameters": "map"},
    "VolumeSnapshotClass": {
        "driver!": "str",
        "deletionPolicy!": ("enum", {"Delete", "Retain"}),
        "parameters": "map",
    },
    "VolumeSnapshot": {
        "spec!": {
            "volumeSnapshotClassName": "str",
            "source!": {"persistentVolumeClaimName": "str", "volumeSnapshotContentName": "str"},
        }
    },
    "ClusterRole": {"rules!": [POLICY_RULE]},
    "Role": {"rules!": [POLICY_RULE]},
    "ClusterRoleBinding": {"subjects!": [SUBJECT], "roleRef!": ROLE_REF},
    "RoleBinding": {"subjects!": [SUBJECT], "roleRef!": ROLE_REF},
}
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def validate(value, spec, path, errors):
    """Check value against spec (see the schema notes above), appending errors."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        known = {k.rstrip("!"): k.endswith("!") for k in spec}
        for key, required in known.items():
            if required and key not in value:
                errors.append(f"{path}.{key}: required field missing")
        for key, v in value.items():
            if key not in known:
                errors.append(f"{path}.{key}: unknown field")
                continue
            sub = spec[key + "!"] if known[key] else spec[key]
            validate(v, sub, f"{path}.{key}", errors)
    elif isinstance(spec, list):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            validate(item, spec[0], f"{path}[{i}]", errors)
    elif isinstance(spec, tuple) and spec[0] == "enum":
        if value not in spec[1]:
            errors.append(f"{path}: {value!r} is not one of {sorted(spec[1])}")
    elif spec == "str":
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {type(value).__name__} ({value!r})")
    elif spec == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: expected an integer, got {value!r}")
    elif spec == "bool":
        if not isinstance(value, bool):
            errors.append(f"{path}: expected true or false, got {value!r}")
    elif spec == "quantity":
        if not isinstance(value, (str, int)) or not QUANTITY.match(str(value)):
            errors.append(f"{path}: {value!r} is not a quantity (e.g. 10Gi)")
    elif spec == "map":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            errors.append(f"{path}: expected a mapping of strings to strings (quote numbers and booleans)")
    elif spec == "any":
        pass
    else:  # pragma: no cover - a schema bug
        raise ValueError(f"bad schema spec {spec!r} at {path}")


# ---------------------------------------------------------------------------------------------
# loading


class Doc:
    """One YAML document: its file, its index in the file, its body."""

    def __init__(self, file, index, body, example):
        self.file, self.index, self.body, self.example = file, index, body, example

    @property
    def kind(self):
        return self.body.get("kind")

    @property
    def name(self):
        return (self.body.get("metadata") or {}).get("name")

    @property
    def namespace(self):
        return (self.body.get("metadata") or {}).get("namespace")

    def where(self):
        return f"{self.file}#{self.index} {self.kind}/{self.name}"


def load(root, errors):
    """Every document of every *.yaml under root (examples/ marked), and the kustomization."""
    docs, kustomization = [], None
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if not f.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            try:
                with open(path) as fh:
                    bodies = list(yaml.safe_load_all(fh))
            except yaml.YAMLError as e:
                errors.append(f"{rel}: YAML does not parse: {e}")
                continue
            for i, body in enumerate(bodies):
                if body is None:
                    continue
                if not isinstance(body, dict):
                    errors.append(f"{rel}#{i}: a document must be a mapping")
                    continue
                if body.get("kind") == "Kustomization":
                    kustomization = (rel, body)
                    continue
                docs.append(Doc(rel, i, body, rel.startswith("examples" + os.sep)))
    return docs, kustomization


# ---------------------------------------------------------------------------------------------
# the ebof csi command line


EBOF_CSI_FLAGS = {  # flag -> takes a value
    "--endpoint": True,
    "--controller": False,
    "--node": False,
    "--boxes": True,
    "--driver-name": True,
    "--node-id": True,
    "--zone": True,
}


def parse_ebof_csi(args, where, errors):
    """Parse `csi --endpoint … (--controller --boxes F | --node) …` into a dict, or None."""
    if not args or args[0] != "csi":
        errors.append(f"{where}: the ebof container's args must start with the `csi` subcommand, got {args}")
        return None
    out, i = {}, 1
    while i < len(args):
        a = args[i]
        flag, eq, value = a.partition("=")
        if flag not in EBOF_CSI_FLAGS:
            errors.append(f"{where}: `ebof csi` has no flag {a!r} (unknown flag)")
            i += 1
            continue
        if flag in out:
            errors.append(f"{where}: `ebof csi` flag {flag} given twice")
        if EBOF_CSI_FLAGS[flag]:
            if not eq:
                if i + 1 >= len(args):
                    errors.append(f"{where}: `ebof csi` flag {flag} needs a value")
                    break
                i += 1
                value = args[i]
            if not value:
                errors.append(f"{where}: `ebof csi` flag {flag} has an empty value")
            out[flag] = value
        else:
            if eq:
                errors.append(f"{where}: `ebof csi` flag {flag} takes no value")
            out[flag] = True
        i += 1
    if "--endpoint" not in out:
        errors.append(f"{where}: `ebof csi` needs --endpoint unix:///PATH")
    elif not out["--endpoint"].startswith("unix:///"):
        errors.append(f"{where}: --endpoint {out['--endpoint']!r} is not unix:///PATH")
    roles = [r for r in ("--controller", "--node") if r in out]
    if len(roles) != 1:
        errors.append(f"{where}: `ebof csi` needs exactly one of --controller and --node, got {roles}")
    if "--controller" in out and "--boxes" not in out:
        errors.append(f"{where}: `ebof csi --controller` needs --boxes FILE")
    if "--node" in out:
        for f in ("--boxes",):
            if f in out:
                errors.append(f"{where}: {f} is a controller flag, given to --node")
    if "--controller" in out:
        for f in ("--node-id", "--zone"):
            if f in out:
                errors.append(f"{where}: {f} is a node flag, given to --controller")
    return out


def flag_value(args, flag):
    """The value of --flag=V or --flag V in a sidecar's args, or None."""
    for i, a in enumerate(args or []):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def strip_unix(address):
    return address[len("unix://"):] if address.startswith("unix://") else address


# ---------------------------------------------------------------------------------------------
# RBAC evaluation


def can(sa_ns, sa_name, verb, group, resource, namespace, docs):
    """Whether ServiceAccount sa_ns/sa_name may `verb` group/resource (in namespace, or cluster
    wide when namespace is None), through the roles and bindings in docs."""
    roles = {(d.kind, d.namespace, d.name): d.body for d in docs if d.kind in ("Role", "ClusterRole")}

    def grants(role):
        for rule in role.get("rules") or []:
            if (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])) and (
                resource in rule.get("resources", []) or "*" in rule.get("resources", [])
            ) and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", [])):
                return True
        return False

    for d in docs:
        if d.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if d.kind == "RoleBinding" and (namespace is None or d.namespace != namespace):
            continue
        subjects = d.body.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == sa_name and s.get("namespace", d.namespace) == sa_ns
            for s in subjects
        ):
            continue
        ref = d.body.get("roleRef") or {}
        key = (ref.get("kind"), d.namespace if ref.get("kind") == "Role" else None, ref.get("name"))
        role = roles.get(key)
        if role and grants(role):
            return True
    return False


# what each sidecar needs (one permission that stands for its upstream rule set), cluster wide
SIDECAR_NEEDS = {
    "csi-provisioner": [("create", "", "persistentvolumes"), ("watch", "storage.k8s.io", "csinodes")],
    "csi-attacher": [("patch", "storage.k8s.io", "volumeattachments/status")],
    "csi-resizer": [("patch", "", "persistentvolumeclaims/status")],
    "csi-snapshotter": [("update", "snapshot.storage.k8s.io", "volumesnapshotcontents/status")],
}
LEADER_ELECTION_SIDECARS = {"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"}


def sidecar_of(image):
    """'csi-provisioner' for registry.k8s.io/sig-storage/csi-provisioner:v6.3.0, else None."""
    if not image.startswith(SIDECAR_PREFIX):
        return None
    return image[len(SIDECAR_PREFIX):].split(":", 1)[0]


# ---------------------------------------------------------------------------------------------
# the checks


def pod_spec(doc):
    if doc.kind == "Pod":
        return doc.body.get("spec")
    if doc.kind in ("Deployment", "DaemonSet", "StatefulSet"):
        return ((doc.body.get("spec") or {}).get("template") or {}).get("spec")
    return None


def check(root):
    """All the checks on the manifests under root; returns the list of problems."""
    errors = []
    docs, kustomization = load(root, errors)
    if not docs:
        errors.append(f"{root}: no manifests found")
        return errors

    # ---- per document: kind, schema, names, namespaces
    seen = {}
    for d in docs:
        api, kind = d.body.get("apiVersion"), d.kind
        if (api, kind) not in KINDS:
            errors.append(f"{d.file}#{d.index}: unknown apiVersion/kind {api}/{kind}")
            continue
        body = {k: v for k, v in d.body.items() if k not in ("apiVersion", "kind", "metadata")}
        if "metadata" not in d.body:
            errors.append(f"{d.where()}: metadata missing")
        else:
            validate(d.body["metadata"], META, f"{d.where()} metadata", errors)
        validate(body, SCHEMAS[kind], d.where(), errors)
        name = d.name
        if isinstance(name, str) and not DNS_SUBDOMAIN.match(name):
            errors.append(f"{d.where()}: metadata.name {name!r} is not a valid name")
        namespaced = KINDS[(api, kind)]
        if namespaced:
            if d.example:
                if not d.namespace:
                    errors.append(f"{d.where()}: namespaced object without metadata.namespace")
            elif d.namespace != NAMESPACE:
                errors.append(f"{d.where()}: namespaced object in namespace {d.namespace!r}, expected {NAMESPACE!r}")
        elif d.namespace is not None:
            errors.append(f"{d.where()}: {kind} is cluster-scoped but has metadata.namespace {d.namespace!r}")
        key = (kind, d.namespace if namespaced else None, name)
        if key in seen:
            errors.append(f"{d.where()}: duplicate of {seen[key]}")
        seen[key] = d.where()
        if kind == "Namespace" and not DNS_LABEL.match(name or ""):
            errors.append(f"{d.where()}: a namespace name must be a DNS label")
        for i, rule in enumerate(d.body.get("rules") or []):
            bad = set(rule.get("verbs") or []) - VERBS
            if bad:
                errors.append(f"{d.where()} rules[{i}]: unknown verbs {sorted(bad)}")
    if errors:
        return errors  # the cross-checks below assume well-formed documents

    def find(kind, name, namespace=None):
        for d in docs:
            if d.kind == kind and d.name == name and (namespace is None or d.namespace == namespace):
                return d
        return None

    namespaces = {d.name for d in docs if d.kind == "Namespace"}
    for d in docs:
        if not d.example and d.namespace and d.namespace not in namespaces:
            errors.append(f"{d.where()}: namespace {d.namespace!r} is not defined by a Namespace manifest")

    # ---- pods: containers, volumes, service accounts
    for d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        if d.kind in ("Deployment", "DaemonSet", "StatefulSet"):
            want = d.body["spec"]["selector"]["matchLabels"]
            have = d.body["spec"]["template"]["metadata"].get("labels") or {}
            if any(have.get(k) != v for k, v in want.items()):
                errors.append(f"{d.where()}: spec.selector.matchLabels {want} do not match the pod labels {have}")
        containers = spec.get("initContainers", []) + spec["containers"]
        names = [c["name"] for c in containers]
        for n in set(names):
            if names.count(n) > 1:
                errors.append(f"{d.where()}: two containers named {n!r}")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        if len(volumes) != len(spec.get("volumes", [])):
            errors.append(f"{d.where()}: two volumes with the same name")
        for v in volumes.values():
            sources = [k for k in v if k != "name"]
            if len(sources) != 1:
                errors.append(f"{d.where()}: volume {v['name']!r} must have exactly one source, has {sources}")
        used = set()
        for c in containers:
            image = c["image"]
            if ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"):
                errors.append(f"{d.where()} container {c['name']}: image {image!r} is not pinned to a version tag")
            mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
            for m in set(mounts):
                if mounts.count(m) > 1:
                    errors.append(f"{d.where()} container {c['name']}: two volumes mounted at {m}")
            for m in c.get("volumeMounts", []) + c.get("volumeDevices", []):
                if m["name"] not in volumes:
                    errors.append(f"{d.where()} container {c['name']}: mounts {m['name']!r}, which is no volume of the pod")
                used.add(m["name"])
                if m.get("mountPropagation") == "Bidirectional" and not (c.get("securityContext") or {}).get("privileged"):
                    errors.append(f"{d.where()} container {c['name']}: Bidirectional mount propagation needs a privileged container")
            ports = [p["containerPort"] for p in c.get("ports", [])]
            if len(set(ports)) != len(ports):
                errors.append(f"{d.where()} container {c['name']}: a port declared twice")
            for probe in ("livenessProbe", "readinessProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str) and port not in {p.get("name") for p in c.get("ports", [])}:
                    errors.append(f"{d.where()} container {c['name']}: {probe} port {port!r} is not a named port of the container")
        for v in volumes:
            if v not in used:
                errors.append(f"{d.where()}: volume {v!r} is mounted by no container")
        for v in volumes.values():
            if "secret" in v and not d.example and not find("Secret", v["secret"]["secretName"], d.namespace):
                errors.append(f"{d.where()}: volume {v['name']!r} uses Secret {v['secret']['secretName']!r}, which is not defined")
            if "persistentVolumeClaim" in v and not find("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"], d.namespace):
                errors.append(f"{d.where()}: volume {v['name']!r} uses PersistentVolumeClaim {v['persistentVolumeClaim']['claimName']!r}, which is not defined")
        sa = spec.get("serviceAccountName")
        if sa and not find("ServiceAccount", sa, d.namespace):
            errors.append(f"{d.where()}: serviceAccountName {sa!r}: no such ServiceAccount in namespace {d.namespace!r}")
        if not d.example and not sa:
            errors.append(f"{d.where()}: no serviceAccountName (the driver's pods use their own)")

    # ---- RBAC: bindings refer to existing roles and service accounts
    for d in docs:
        if d.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = d.body["roleRef"]
        if d.kind == "ClusterRoleBinding" and ref["kind"] != "ClusterRole":
            errors.append(f"{d.where()}: a ClusterRoleBinding must refer to a ClusterRole, not a {ref['kind']}")
        elif ref["kind"] == "ClusterRole" and not find("ClusterRole", ref["name"]):
            errors.append(f"{d.where()}: roleRef ClusterRole {ref['name']!r} is not defined")
        elif ref["kind"] == "Role" and not find("Role", ref["name"], d.namespace):
            errors.append(f"{d.where()}: roleRef Role {ref['name']!r} is not defined in namespace {d.namespace!r}")
        for s in d.body["subjects"]:
            if s["kind"] != "ServiceAccount":
                continue
            ns = s.get("namespace") or (d.namespace if d.kind == "RoleBinding" else None)
            if ns is None:
                errors.append(f"{d.where()}: subject ServiceAccount {s['name']!r} needs a namespace")
            elif not find("ServiceAccount", s["name"], ns):
                errors.append(f"{d.where()}: subject ServiceAccount {ns}/{s['name']} is not defined")

    # ---- the driver
    csidrivers = [d for d in docs if d.kind == "CSIDriver"]
    if len(csidrivers) != 1:
        errors.append(f"expected one CSIDriver, found {len(csidrivers)}")
        return errors
    csidriver = csidrivers[0]
    driver = csidriver.name
    dspec = csidriver.body["spec"]
    if dspec.get("attachRequired") is not True:
        errors.append(f"{csidriver.where()}: attachRequired must be true (ControllerPublishVolume allows the node's NQN)")
    if dspec.get("podInfoOnMount") is not False:
        errors.append(f"{csidriver.where()}: podInfoOnMount must be false")
    if dspec.get("volumeLifecycleModes") != ["Persistent"]:
        errors.append(f"{csidriver.where()}: volumeLifecycleModes must be [Persistent]")

    for d in docs:
        if d.kind == "StorageClass":
            if d.body["provisioner"] != driver:
                errors.append(f"{d.where()}: provisioner {d.body['provisioner']!r} is not the CSIDriver {driver!r}")
            params = d.body.get("parameters") or {}
            for k in params:
                if k not in ("pool", "csi.storage.k8s.io/fstype", "auth", "replicas"):
                    errors.append(f"{d.where()}: parameter {k!r} is not one the driver takes (pool, csi.storage.k8s.io/fstype, auth, replicas)")
            replicas = params.get("replicas")
            if replicas is not None and replicas not in ("1", "2"):
                errors.append(f"{d.where()}: replicas {replicas!r} is not \"1\" or \"2\" (a quoted string)")
            auth = params.get("auth")
            if auth is not None and auth not in ("none", "dhchap"):
                errors.append(f"{d.where()}: auth {auth!r} is not none or dhchap (tls and both are not supported yet)")
            fstype = params.get("csi.storage.k8s.io/fstype")
            if fstype is not None and fstype not in ("ext4", "xfs"):
                errors.append(f"{d.where()}: csi.storage.k8s.io/fstype {fstype!r} is not ext4 or xfs")
        if d.kind == "VolumeAttributesClass":
            if d.body["driverName"] != driver:
                errors.append(f"{d.where()}: driverName {d.body['driverName']!r} is not the CSIDriver {driver!r}")
            qos = ("iops", "mbps", "readIops", "writeIops", "readMbps", "writeMbps")
            for k, v in (d.body.get("parameters") or {}).items():
                if k not in qos:
                    errors.append(f"{d.where()}: parameter {k!r} is not one ControllerModifyVolume changes ({', '.join(qos)})")
                elif not (isinstance(v, str) and v.isdigit()):
                    errors.append(f"{d.where()}: {k} {v!r} is not a non-negative integer (a quoted string)")
        if d.kind == "VolumeSnapshotClass" and d.body["driver"] != driver:
            errors.append(f"{d.where()}: driver {d.body['driver']!r} is not the CSIDriver {driver!r}")
        if d.kind == "PersistentVolumeClaim":
            sc = d.body["spec"].get("storageClassName")
            if sc and not find("StorageClass", sc):
                errors.append(f"{d.where()}: storageClassName {sc!r} is not defined")
            src = d.body["spec"].get("dataSource")
            if src and src["kind"] == "VolumeSnapshot" and not find("VolumeSnapshot", src["name"], d.namespace):
                errors.append(f"{d.where()}: dataSource VolumeSnapshot {src['name']!r} is not defined")
            if src and src["kind"] == "PersistentVolumeClaim" and not find("PersistentVolumeClaim", src["name"], d.namespace):
                errors.append(f"{d.where()}: dataSource PersistentVolumeClaim {src['name']!r} is not defined")
            vac = d.body["spec"].get("volumeAttributesClassName")
            if vac and not find("VolumeAttributesClass", vac):
                errors.append(f"{d.where()}: volumeAttributesClassName {vac!r} is not defined")
        if d.kind == "VolumeSnapshot":
            vsc = d.body["spec"].get("volumeSnapshotClassName")
            if vsc and not find("VolumeSnapshotClass", vsc):
                errors.append(f"{d.where()}: volumeSnapshotClassName {vsc!r} is not defined")
            pvc = d.body["spec"]["source"].get("persistentVolumeClaimName")
            if pvc and not find("PersistentVolumeClaim", pvc, d.namespace):
                errors.append(f"{d.where()}: source PersistentVolumeClaim {pvc!r} is not defined")

    # ---- the driver's pods: ebof csi args, the socket, the sidecars
    roles_found = {}
    ebof_images = set()
    for d in docs:
        spec = pod_spec(d)
        if spec is None or d.example:
            continue
        containers = spec["containers"]
        ebof = [c for c in containers if (c.get("args") or [""])[0] == "csi"]
        for c in spec.get("initContainers", []) + containers:
            if "ebof" in c["image"].rsplit("/", 1)[-1]:
                ebof_images.add(c["image"])
        if len(ebof) != 1:
            errors.append(f"{d.where()}: expected one `ebof csi` container, found {len(ebof)}")
            continue
        drv = ebof[0]
        where = f"{d.where()} container {drv['name']}"
        if drv.get("command"):
            errors.append(f"{where}: must not override the image's entrypoint (/usr/local/bin/ebof)")
        parsed = parse_ebof_csi(drv.get("args") or [], where, errors)
        if not parsed or "--endpoint" not in parsed:
            continue
        role = "controller" if "--controller" in parsed else "node"
        if role in roles_found:
            errors.append(f"{where}: a second {role} workload (the first: {roles_found[role]})")
        roles_found[role] = d.where()
        name = parsed.get("--driver-name", DRIVER_DEFAULT)
        if name != driver:
            errors.append(f"{where}: --driver-name {name!r} is not the CSIDriver {driver!r}")
        sock = strip_unix(parsed["--endpoint"])
        sock_dir = os.path.dirname(sock)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}

        def mount_at(container, directory):
            for m in container.get("volumeMounts", []):
                if m["mountPath"].rstrip("/") == directory.rstrip("/"):
                    return m
            return None

        sock_mount = mount_at(drv, sock_dir)
        if not sock_mount:
            errors.append(f"{where}: the socket directory {sock_dir} of --endpoint is not a mounted volume")
            continue
        sock_volume = volumes.get(sock_mount["name"])
        # every sidecar talks to the same socket through the same volume
        sidecars = {}
        for c in containers:
            sc = sidecar_of(c["image"])
            if sc is None:
                continue
            sidecars[sc] = c
            cwhere = f"{d.where()} container {c['name']}"
            addr = flag_value(c.get("args"), "--csi-address")
            if addr is None:
                errors.append(f"{cwhere}: no --csi-address")
                continue
            if strip_unix(addr) != sock:
                errors.append(f"{cwhere}: --csi-address {addr} is not the driver's socket {sock} (--endpoint)")
                continue
            m = mount_at(c, os.path.dirname(strip_unix(addr)))
            if not m or m["name"] != sock_mount["name"]:
                errors.append(f"{cwhere}: --csi-address {addr}: its directory is not the driver's socket volume {sock_mount['name']!r}")
            if sc in LEADER_ELECTION_SIDECARS and role == "controller":
                if "--leader-election" not in (c.get("args") or []):
                    errors.append(f"{cwhere}: --leader-election missing")
            if sc == "csi-provisioner" and "--feature-gates=Topology=true" not in (c.get("args") or []):
                errors.append(f"{cwhere}: --feature-gates=Topology=true missing (topology.csi.ebof.io/zone)")
        sa = spec.get("serviceAccountName")
        if role == "controller":
            for needed in ("csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"):
                if needed not in sidecars:
                    errors.append(f"{d.where()}: the controller pod has no {needed} sidecar")
            if sock_volume and "emptyDir" not in sock_volume:
                errors.append(f"{d.where()}: the controller's socket volume should be an emptyDir")
            for sc, needs in SIDECAR_NEEDS.items():
                if sc not in sidecars:
                    continue
                for verb, group, resource in needs:
                    if not can(d.namespace, sa, verb, group, resource, None, docs):
                        errors.append(f"{d.where()}: ServiceAccount {sa!r} may not {verb} {resource} ({sc} needs it)")
                if sc in LEADER_ELECTION_SIDECARS and not can(d.namespace, sa, "create", "coordination.k8s.io", "leases", d.namespace, docs):
                    errors.append(f"{d.where()}: ServiceAccount {sa!r} may not create leases in {d.namespace} ({sc} leader election)")
            # the boxes file: in a mounted Secret, TOML, with its token files beside it
            boxes = parsed.get("--boxes", "")
            bm = mount_at(drv, os.path.dirname(boxes))
            if not bm:
                errors.append(f"{where}: --boxes {boxes}: its directory is not a mounted volume")
            elif "secret" not in volumes.get(bm["name"], {}):
                errors.append(f"{where}: --boxes {boxes} is not in a mounted Secret (it names the token files)")
            else:
                secret = find("Secret", volumes[bm["name"]]["secret"]["secretName"], d.namespace)
                if secret is not None:
                    check_boxes(secret, os.path.basename(boxes), bm["mountPath"], where, errors)
        else:
            check_node(d, spec, drv, parsed, driver, sock, sock_volume, sidecars, where, errors)
    for role in ("controller", "node"):
        if role not in roles_found:
            errors.append(f"no {role} workload runs `ebof csi --{role}`")
    if len(ebof_images) > 1:
        errors.append(f"the ebof containers use different images: {sorted(ebof_images)}")

    # ---- kustomization: every manifest listed, nothing missing
    if kustomization is None:
        errors.append("no kustomization.yaml")
    else:
        rel, k = kustomization
        listed = k.get("resources") or []
        for r in listed:
            if not os.path.isfile(os.path.join(root, r)):
                errors.append(f"{rel}: resource {r!r} does not exist")
        files = {d.file for d in docs if not d.example}
        for f in sorted(files - set(listed)):
            errors.append(f"{rel}: {f} is not listed in resources")
    return errors


def check_boxes(secret, key, mount_path, where, errors):
    data = secret.body.get("stringData") or {}
    if key not in data:
        if key not in (secret.body.get("data") or {}):
            errors.append(f"{where}: --boxes file {key!r} is not a key of Secret {secret.name!r}")
        return
    if tomllib is None:
        print("check_manifests: note: no tomllib (Python < 3.11): boxes.toml not parsed")
        return
    try:
        boxes = tomllib.loads(data[key])
    except tomllib.TOMLDecodeError as e:
        errors.append(f"{secret.where()}: {key} is not valid TOML: {e}")
        return
    unknown = set(boxes) - {"boxes"}
    if unknown or not isinstance(boxes.get("boxes"), list) or not boxes["boxes"]:
        errors.append(f"{secret.where()}: {key} must hold [[boxes]] tables only (found {sorted(boxes)})")
        return
    keys = set(data) | set(secret.body.get("data") or {})
    for i, b in enumerate(boxes["boxes"]):
        bad = set(b) - {"api", "token_file", "zone", "name", "ca_file", "insecure_http"}
        if bad:
            errors.append(f"{secret.where()}: {key} boxes[{i}]: unknown keys {sorted(bad)}")
        api = b.get("api", "")
        if not re.match(r"^(https://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$", api):
            errors.append(f"{secret.where()}: {key} boxes[{i}].api {api!r} is not [https://]ADDR:PORT")
        # The token never travels in clear beyond loopback (issue 32): HTTPS, or said so.
        if not api.startswith("https://") and not b.get("insecure_http") and not api.startswith(("127.", "[::1]", "localhost:")):
            errors.append(f"{secret.where()}: {key} boxes[{i}].api {api!r} is plain HTTP: use https:// (or insecure_http = true)")
        ca = b.get("ca_file")
        if ca and (os.path.dirname(ca).rstrip("/") != mount_path.rstrip("/") or os.path.basename(ca) not in keys):
            errors.append(f"{secret.where()}: {key} boxes[{i}].ca_file {ca!r} is not a key of this Secret mounted at {mount_path}")
        tf = b.get("token_file")
        if not tf:
            errors.append(f"{secret.where()}: {key} boxes[{i}] has no token_file")
        elif os.path.dirname(tf).rstrip("/") != mount_path.rstrip("/") or os.path.basename(tf) not in keys:
            errors.append(f"{secret.where()}: {key} boxes[{i}].token_file {tf!r} is not a key of this Secret mounted at {mount_path}")


def check_node(d, spec, drv, parsed, driver, sock, sock_volume, sidecars, where, errors):
    if d.kind != "DaemonSet":
        errors.append(f"{d.where()}: the node plugin must be a DaemonSet")
    if not spec.get("hostNetwork"):
        errors.append(f"{d.where()}: the node plugin needs hostNetwork: true (the host's NVMe/TCP connections)")
    if not (drv.get("securityContext") or {}).get("privileged"):
        errors.append(f"{where}: the node plugin must be privileged (nvme connect, mkfs, mount)")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"].rstrip("/"): m for m in drv.get("volumeMounts", [])}
    for path in ("/dev", "/sys", "/lib/modules", "/etc/nvme", KUBELET_DIR):
        m = mounts.get(path)
        host = ((volumes.get(m["name"]) or {}).get("hostPath") or {}).get("path", "").rstrip("/") if m else None
        if host != path:
            errors.append(f"{where}: needs the host's {path} mounted at {path} (hostPath)")
        elif path == KUBELET_DIR and m.get("mountPropagation") != "Bidirectional":
            errors.append(f"{where}: {KUBELET_DIR} needs mountPropagation: Bidirectional")
    plugin_dir = f"{KUBELET_DIR}/plugins/{driver}"
    host_sock_dir = ((sock_volume or {}).get("hostPath") or {}).get("path", "").rstrip("/")
    if host_sock_dir != plugin_dir:
        errors.append(f"{where}: the socket volume's hostPath {host_sock_dir!r} is not {plugin_dir}/ (the plugin directory of {driver})")
    reg = sidecars.get("csi-node-driver-registrar")
    if reg is None:
        errors.append(f"{d.where()}: the node pod has no csi-node-driver-registrar")
        return
    krp = flag_value(reg.get("args"), "--kubelet-registration-path")
    want = f"{host_sock_dir}/{os.path.basename(sock)}"
    if krp != want:
        errors.append(f"{d.where()} container {reg['name']}: --kubelet-registration-path {krp} is not the host path of the driver's socket {want}")
    regmount = {m["mountPath"].rstrip("/"): m for m in reg.get("volumeMounts", [])}.get("/registration")
    host = ((volumes.get(regmount["name"]) or {}).get("hostPath") or {}).get("path", "").rstrip("/") if regmount else None
    if host != f"{KUBELET_DIR}/plugins_registry":
        errors.append(f"{d.where()} container {reg['name']}: needs {KUBELET_DIR}/plugins_registry/ mounted at /registration")
    for flag in ("--node-id", "--zone"):
        if flag in parsed and not parsed[flag]:
            errors.append(f"{where}: {flag} is empty")


# ---------------------------------------------------------------------------------------------
# the negative self-test: mutations of a copy that the check must reject


def docs_of(path):
    with open(path) as fh:
        return [b for b in yaml.safe_load_all(fh) if b is not None]


def rewrite(path, bodies):
    with open(path, "w") as fh:
        yaml.safe_dump_all(bodies, fh, sort_keys=False)


def container(bodies, kind, name):
    for b in bodies:
        if b.get("kind") in ("Deployment", "DaemonSet", "StatefulSet"):
            spec = b["spec"]["template"]["spec"]
            for c in spec.get("initContainers", []) + spec["containers"]:
                if c["name"] == name and b["kind"] == kind:
                    return c, spec
    raise KeyError(f"no container {name} in a {kind}")


def mutate(root, file, fn):
    path = os.path.join(root, file)
    bodies = docs_of(path)
    fn(bodies)
    rewrite(path, bodies)


def set_arg(c, prefix, value):
    c["args"] = [value if a.startswith(prefix) else a for a in c["args"]]


def _registrar_path(b):
    c, _ = container(b, "DaemonSet", "node-driver-registrar")
    set_arg(c, "--kubelet-registration-path", "--kubelet-registration-path=/var/lib/kubelet/plugins/other.io/csi.sock")


def _provisioner_address(b):
    c, _ = container(b, "Deployment", "csi-provisioner")
    set_arg(c, "--csi-address", "--csi-address=/csi/other.sock")


def _drop_volume(b):
    _, spec = container(b, "Deployment", "ebof-csi")
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "boxes"]


def _storageclass_provisioner(b):
    b[0]["provisioner"] = "csi.ebof.example"


def _storageclass_auth_tls(b):
    b[0]["parameters"]["auth"] = "tls"


def _binding_missing_role(b):
    for x in b:
        if x["kind"] == "RoleBinding":
            x["roleRef"]["name"] = "no-such-role"
            return


def _missing_sa(b):
    _, spec = container(b, "DaemonSet", "ebof-csi")
    spec["serviceAccountName"] = "ebof-csi-nobody"


def _unknown_node_flag(b):
    c, _ = container(b, "DaemonSet", "ebof-csi")
    c["args"].append("--nodeid=nqn.2014-08.org.nvmexpress:uuid:0")


def _both_roles(b):
    c, _ = container(b, "DaemonSet", "ebof-csi")
    c["args"].append("--controller")


def _wrong_namespace(b):
    b[0]["metadata"]["namespace"] = "default"


def _typo_field(b):
    c, _ = container(b, "DaemonSet", "ebof-csi")
    c["volumeMount"] = c.pop("volumeMounts")


def _old_api(b):
    b[0]["apiVersion"] = "apps/v1beta1"


def _no_bidirectional(b):
    c, _ = container(b, "DaemonSet", "ebof-csi")
    for m in c["volumeMounts"]:
        m.pop("mountPropagation", None)


def _boxes_outside_mount(b):
    c, _ = container(b, "Deployment", "ebof-csi")
    set_arg(c, "--boxes", "--boxes=/etc/boxes.toml")


def _drop_attacher(b):
    _, spec = container(b, "Deployment", "ebof-csi")
    spec["containers"] = [c for c in spec["containers"] if c["name"] != "csi-attacher"]


def _driver_name(b):
    c, _ = container(b, "Deployment", "ebof-csi")
    set_arg(c, "--driver-name", "--driver-name=csi.other.io")


def _no_privileged(b):
    c, _ = container(b, "DaemonSet", "ebof-csi")
    c["securityContext"]["privileged"] = False


def _token_not_in_secret(b):
    b[0]["stringData"].pop("box2.token")


def _unpinned_image(b):
    c, _ = container(b, "Deployment", "csi-resizer")
    c["image"] = c["image"].split(":")[0]


def _lease_rules_dropped(b):
    for x in b:
        if x["kind"] == "Role":
            x["rules"] = [r for r in x["rules"] if "leases" not in r["resources"]] or [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
            ]


def _attacher_rbac_dropped(b):
    for x in b:
        if x["kind"] == "ClusterRole" and x["metadata"]["name"].endswith("attacher-runner"):
            x["rules"] = [r for r in x["rules"] if "volumeattachments/status" not in r["resources"]]


def _broken_yaml(root):
    with open(os.path.join(root, "csidriver.yaml"), "a") as fh:
        fh.write("spec:\n  attachRequired: [true\n")


def _unlisted_file(root):
    k = os.path.join(root, "kustomization.yaml")
    body = docs_of(k)[0]
    body["resources"] = [r for r in body["resources"] if r != "snapshotclass.yaml"]
    rewrite(k, [body])


MUTATIONS = [
    # (description, file or None for a function of the root, mutation, expected message part)
    ("registrar registration path elsewhere", "node.yaml", _registrar_path, "--kubelet-registration-path"),
    ("provisioner on another socket", "controller.yaml", _provisioner_address, "--csi-address"),
    ("a mount without its volume", "controller.yaml", _drop_volume, "no volume of the pod"),
    ("StorageClass provisioner typo", "storageclass.yaml", _storageclass_provisioner, "provisioner"),
    ("StorageClass auth the driver refuses", "storageclass.yaml", _storageclass_auth_tls, "auth 'tls'"),
    ("RoleBinding to a missing Role", "rbac.yaml", _binding_missing_role, "is not defined"),
    ("serviceAccountName without a ServiceAccount", "node.yaml", _missing_sa, "no such ServiceAccount"),
    ("unknown ebof csi flag", "node.yaml", _unknown_node_flag, "unknown flag"),
    ("both --controller and --node", "node.yaml", _both_roles, "exactly one of --controller and --node"),
    ("object in another namespace", "boxes-secret.yaml", _wrong_namespace, "expected 'ebof-csi'"),
    ("misspelt field", "node.yaml", _typo_field, "unknown field"),
    ("removed apiVersion", "controller.yaml", _old_api, "unknown apiVersion/kind"),
    ("kubelet dir without Bidirectional", "node.yaml", _no_bidirectional, "Bidirectional"),
    ("--boxes outside the Secret", "controller.yaml", _boxes_outside_mount, "--boxes"),
    ("no external-attacher", "controller.yaml", _drop_attacher, "csi-attacher"),
    ("--driver-name not the CSIDriver", "controller.yaml", _driver_name, "--driver-name"),
    ("node plugin not privileged", "node.yaml", _no_privileged, "privileged"),
    ("token file missing from the Secret", "boxes-secret.yaml", _token_not_in_secret, "token_file"),
    ("sidecar image without a tag", "controller.yaml", _unpinned_image, "not pinned"),
    ("sidecars may not take their leases", "rbac.yaml", _lease_rules_dropped, "may not create leases"),
    ("attacher may not patch VolumeAttachment status", "rbac.yaml", _attacher_rbac_dropped, "volumeattachments/status"),
    ("broken YAML", None, _broken_yaml, "YAML does not parse"),
    ("manifest missing from kustomization", None, _unlisted_file, "not listed in resources"),
]


def self_test(root):
    """Apply each mutation to a fresh copy of root; the check must fail with the expected message."""
    problems = []
    for desc, file, fn, expect in MUTATIONS:
        with tempfile.TemporaryDirectory(prefix="ebof-manifests-") as tmp:
            copy_root = os.path.join(tmp, "k")
            shutil.copytree(root, copy_root)
            try:
                if file is None:
                    fn(copy_root)
                else:
                    mutate(copy_root, file, fn)
            except (KeyError, IndexError, OSError) as e:
                problems.append(f"self-test {desc!r}: the mutation does not apply to these manifests ({e})")
                continue
            errors = check(copy_root)
            if not errors:
                problems.append(f"self-test {desc!r}: the broken copy PASSED the check")
            elif not any(expect in e for e in errors):
                problems.append(f"self-test {desc!r}: failed, but not with {expect!r}: {errors}")
            else:
                hit = next(e for e in errors if expect in e)
                print(f"  rejected as it must: {desc}: {hit}")
    return problems


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    root = args[0] if args else os.path.join(repo, "deploy", "kubernetes")
    errors = check(root)
    docs, _ = load(root, [])
    if errors:
        print(f"check_manifests: FAILED: {len(errors)} problem(s) in {root}:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    files = sorted({d.file for d in docs})
    print(f"check_manifests: {len(docs)} documents in {len(files)} files OK ({root})")
    if "--no-self-test" in sys.argv:
        return 0
    problems = self_test(root)
    if problems:
        print(f"check_manifests: FAILED: the negative self-test ({len(problems)} of {len(MUTATIONS)}):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check_manifests: negative self-test OK: all {len(MUTATIONS)} broken copies rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
