#!/usr/bin/env python3
"""Compare `ebof identify --json` of the Linux kernel target (nvmet) with ours (ebof serve)
serving a namespace of the same size.

Prints every field that differs (informational: vendor choices such as serial numbers, MDTS or
queue depth legitimately differ), then checks the fields where both targets must agree because
the NVMe-oF specification or a Linux host depends on them. Exit status 1 if any of those differ.
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    kernel, ours = load(sys.argv[1]), load(sys.argv[2])
    kc, oc = kernel["controller"], ours["controller"]
    kn, on = kernel["namespaces"][0], ours["namespaces"][0]

    print(f"{'field':<14} {'linux nvmet':>24} {'ebof':>24}")
    for scope, a, b in (("ctrl", kc, oc), ("ns", kn, on)):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                print(f"{scope + '.' + k:<14} {str(a.get(k)):>24.24} {str(b.get(k)):>24.24}")

    failures = []

    def must(name, ok):
        print(f"  {'ok ' if ok else 'BAD'} {name}")
        if not ok:
            failures.append(name)

    print("required agreement:")
    for k in ("cntrltype", "sqes", "cqes", "iorcsz", "icdoff", "fcatt", "msdbd"):
        must(f"ctrl.{k} equal ({kc.get(k)} vs {oc.get(k)})", kc.get(k) == oc.get(k))
    must("ctrl.sgls: SGLs supported (bit 0) on both", kc["sgls"] & 1 == 1 and oc["sgls"] & 1 == 1)
    must("ctrl.ioccsz >= 4 (a 64-byte SQE fits) on both", kc["ioccsz"] >= 4 and oc["ioccsz"] >= 4)
    must("ctrl.nn >= 1 on both", kc["nn"] >= 1 and oc["nn"] >= 1)
    must("ctrl.ver >= 1.3 on both", kc["ver"] >= 0x10300 and oc["ver"] >= 0x10300)
    must("ctrl.subnqn echoes the NQN connected to",
         kc["subnqn"] == sys.argv[3] and oc["subnqn"] == sys.argv[4])
    must("ctrl.kas > 0 on both (keep-alive supported)", kc["kas"] > 0 and oc["kas"] > 0)
    for k in ("nsze", "ncap", "lba_size", "nlbaf", "flbas"):
        must(f"ns.{k} equal ({kn.get(k)} vs {on.get(k)})", kn.get(k) == on.get(k))
    must("ns.nguid or eui64 or uuid present on both",
         any(kn.get(k) not in (None, "", "0" * 32, "0" * 16) for k in ("nguid", "eui64", "uuid"))
         and any(on.get(k) not in (None, "", "0" * 32, "0" * 16) for k in ("nguid", "eui64", "uuid")))
    if failures:
        print(f"{len(failures)} required field(s) differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
