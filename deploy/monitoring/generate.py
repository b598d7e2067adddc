#!/usr/bin/env python3
"""Write the generated files of deploy/monitoring/ from this script and ebof-alerts.yml:

  dashboards/ebof-box.json, dashboards/ebof-fleet.json  Grafana dashboards (datasource input
                                                        ${DS_PROMETHEUS})
  prometheus-rule.yaml                                  the PrometheusRule: ebof-alerts.yml's
                                                        groups, as they are

Usage: generate.py          rewrite them
       generate.py --check  exit 1, naming the file, when a committed file differs from what
                            this script makes (scripts/check-monitoring.sh runs it)
Needs python3 only.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
INPUTS = [
    {
        "name": "DS_PROMETHEUS",
        "label": "Prometheus",
        "description": "The Prometheus that scrapes the ebof boxes",
        "type": "datasource",
        "pluginId": "prometheus",
        "pluginName": "Prometheus",
    }
]


class Grid:
    """Lays panels out left to right, 24 columns wide."""

    def __init__(self):
        self.x, self.y, self.row_h, self.next_id = 0, 0, 0, 1

    def place(self, panel, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        panel["id"] = self.next_id
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        p = {"type": "row", "title": title, "collapsed": False, "panels": []}
        self.place(p, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0
        return p


def targets(queries, fmt=None, instant=False):
    out = []
    for i, (expr, legend) in enumerate(queries):
        t = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
        if fmt:
            t["format"] = fmt
        if instant:
            t["instant"] = True
        out.append(t)
    return out


def timeseries(title, queries, unit, description=""):
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}},
        "targets": targets(queries),
    }


def stat(title, queries, unit="none", description=""):
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
        "targets": targets(queries),
    }


def table(title, queries, description=""):
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
        "transformations": [{"id": "merge", "options": {}}],
        "targets": targets(queries, fmt="table", instant=True),
    }


def heatmap(title, expr, description=""):
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "options": {
            "calculate": False,
            "yAxis": {"unit": "s"},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges"},
        },
        "targets": targets([(expr, "{{le}}")], fmt="heatmap"),
    }


def variable(name, query, label, include_all=True):
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": include_all,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "sort": 1,
    }


def dashboard(uid, title, description, panels, variables):
    return {
        "__inputs": INPUTS,
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        ],
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["ebof", "nvme-of", "storage"],
        "timezone": "",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    }


R = "[$__rate_interval]"


def box_dashboard():
    s = '{instance=~"$instance"}'
    ns = '{instance=~"$instance",subsystem=~"$subsystem"}'
    g, p = Grid(), []
    p.append(g.row("Overview"))
    p.append(g.place(stat("Version", [('ebof_build_info' + s, "{{version}}")], description="ebof_build_info"), 4, 4))
    p.append(g.place(stat("Subsystems", [("sum(ebof_subsystems" + s + ")", "")]), 4, 4))
    p.append(g.place(stat("I/O controllers", [('sum(ebof_controllers{instance=~"$instance",kind="io"})', "")]), 4, 4))
    p.append(g.place(stat("Connections open", [("sum(ebof_connections_open" + s + ")", "")]), 4, 4))
    p.append(g.place(stat("I/O queues", [("sum(ebof_controller_io_queues" + s + ") or vector(0)", "")]), 4, 4))
    p.append(g.place(stat("DIM registrations", [("sum(ebof_dim_registrations" + s + ")", "")]), 4, 4))
    p.append(g.row("I/O"))
    p.append(g.place(timeseries("IOPS", [
        ("sum by (subsystem, nsid) (rate(ebof_namespace_read_commands_total" + ns + R + "))", "read {{subsystem}} ns {{nsid}}"),
        ("sum by (subsystem, nsid) (rate(ebof_namespace_write_commands_total" + ns + R + "))", "write {{subsystem}} ns {{nsid}}"),
    ], "iops"), 12, 8))
    p.append(g.place(timeseries("Bandwidth", [
        ("sum by (subsystem, nsid) (rate(ebof_namespace_read_bytes_total" + ns + R + "))", "read {{subsystem}} ns {{nsid}}"),
        ("sum by (subsystem, nsid) (rate(ebof_namespace_written_bytes_total" + ns + R + "))", "write {{subsystem}} ns {{nsid}}"),
    ], "Bps"), 12, 8))
    p.append(g.place(heatmap("Read latency", "sum by (le) (rate(ebof_namespace_read_latency_seconds_bucket" + ns + R + "))",
                             "In the target, receive to completion"), 8, 8))
    p.append(g.place(heatmap("Write latency", "sum by (le) (rate(ebof_namespace_write_latency_seconds_bucket" + ns + R + "))",
                             "In the target, receive to completion"), 8, 8))
    p.append(g.place(timeseries("Latency p50 / p99", [
        ("histogram_quantile(0.5, sum by (le) (rate(ebof_namespace_read_latency_seconds_bucket" + ns + R + ")))", "read p50"),
        ("histogram_quantile(0.99, sum by (le) (rate(ebof_namespace_read_latency_seconds_bucket" + ns + R + ")))", "read p99"),
        ("histogram_quantile(0.5, sum by (le) (rate(ebof_namespace_write_latency_seconds_bucket" + ns + R + ")))", "write p50"),
        ("histogram_quantile(0.99, sum by (le) (rate(ebof_namespace_write_latency_seconds_bucket" + ns + R + ")))", "write p99"),
    ], "s"), 8, 8))
    p.append(g.place(timeseries("QoS waits", [
        ("sum by (subsystem, nsid) (rate(ebof_namespace_qos_waited_commands_total" + ns + R + "))", "waited {{subsystem}} ns {{nsid}}"),
        ("sum by (subsystem, nsid) (rate(ebof_namespace_qos_wait_seconds_total" + ns + R + "))", "seconds waited per second {{subsystem}} ns {{nsid}}"),
    ], "short", "Commands held back by the namespace's QoS limits"), 12, 8))
    p.append(g.place(table("QoS limits", [("ebof_namespace_qos_limit" + ns, "")]), 12, 8))
    p.append(g.row("Errors"))
    p.append(g.place(timeseries("Backend errors by class", [
        ("sum by (class) (rate(ebof_namespace_backend_errors_total" + ns + R + "))", "{{class}}"),
        ("sum(rate(ebof_namespace_media_errors_total" + ns + R + "))", "media and integrity"),
    ], "short"), 12, 8))
    p.append(g.place(timeseries("Protocol and connection errors", [
        ("sum(rate(ebof_protocol_errors_total" + s + R + "))", "protocol errors"),
        ("sum(rate(ebof_host_terminations_total" + s + R + "))", "host terminations"),
        ("sum(rate(ebof_handshake_timeouts_total" + s + R + "))", "handshake timeouts"),
        ("sum(rate(ebof_keep_alive_expiries_total" + s + R + "))", "keep-alive expiries"),
        ("sum(rate(ebof_admin_disconnects_total" + s + R + "))", "API disconnects"),
    ], "short"), 12, 8))
    p.append(g.row("Connections and security"))
    p.append(g.place(timeseries("Connections", [
        ("sum(ebof_connections_open" + s + ")", "open"),
        ("sum(rate(ebof_connections_accepted_total" + s + R + "))", "accepted/s"),
        ("sum(rate(ebof_connections_refused_total" + s + R + "))", "refused/s (caps)"),
        ("sum by (kind) (ebof_controllers" + s + ")", "{{kind}} controllers"),
    ], "short"), 12, 8))
    p.append(g.place(timeseries("Authentication and TLS failures", [
        ("sum(rate(ebof_auth_failures_total" + s + R + "))", "DH-HMAC-CHAP failures/s"),
        ("sum(rate(ebof_tls_failures_total" + s + R + "))", "TLS failures/s"),
        ("sum(rate(ebof_dim_refusals_total" + s + R + "))", "DIM refusals/s"),
    ], "short"), 12, 8))
    p.append(g.place(table("ANA states", [("ebof_ana_state" + s + " == 1", "")],
                           "Each ANA group a namespace uses, per listener"), 24, 6))
    p.append(g.row("Capacity"))
    p.append(g.place(timeseries("Pools", [
        ("ebof_pool_capacity_bytes" + s, "{{pool}} capacity"),
        ("ebof_pool_provisioned_bytes" + s, "{{pool}} provisioned"),
        ("ebof_pool_used_bytes" + s, "{{pool}} used"),
        ("ebof_pool_free_bytes" + s, "{{pool}} free"),
    ], "bytes"), 12, 8))
    p.append(g.place(timeseries("Thin usage (allocated / size)", [
        ("ebof_namespace_allocated_bytes" + ns + " / ebof_namespace_size_bytes" + ns, "{{subsystem}} ns {{nsid}}"),
    ], "percentunit"), 12, 8))
    p.append(g.row("Replication"))
    p.append(g.place(table("Mirrored namespaces", [
        ("ebof_mirror_role" + ns, "role"),
        ("ebof_mirror_in_sync" + ns, "in sync"),
        ("ebof_mirror_fenced" + ns, "fenced"),
        ("ebof_mirror_epoch" + ns, "epoch"),
    ], "role 1 primary, 2 secondary"), 12, 8))
    p.append(g.place(timeseries("Resync", [
        ("ebof_mirror_resync_bytes_left" + ns, "left {{subsystem}} ns {{nsid}}"),
        ("ebof_mirror_in_flight" + ns, "in flight {{subsystem}} ns {{nsid}}"),
        ("ebof_mirror_dirty_regions" + ns, "dirty regions {{subsystem}} ns {{nsid}}"),
    ], "short"), 12, 8))
    variables = [
        variable("instance", "label_values(ebof_build_info, instance)", "Box", include_all=False),
        variable("subsystem", 'label_values(ebof_namespace_size_bytes{instance=~"$instance"}, subsystem)', "Subsystem"),
    ]
    return dashboard("ebof-box", "ebof / box", "One ebof box: I/O, latency, QoS, errors, connections, security, capacity, replication",
                     p, variables)


def fleet_dashboard():
    z = '{zone=~"$zone"}'
    g, p = Grid(), []
    p.append(g.row("Boxes"))
    p.append(g.place(stat("Boxes up", [('sum(up{job=~"ebof.*",zone=~"$zone"})', "")]), 6, 4))
    p.append(g.place(stat("Boxes down", [('count(up{job=~"ebof.*",zone=~"$zone"} == 0) or vector(0)', "")]), 6, 4))
    p.append(g.place(stat("Total IOPS", [
        ("sum(rate(ebof_namespace_read_commands_total" + z + R + ")) + sum(rate(ebof_namespace_write_commands_total" + z + R + "))", "")],
        "iops"), 6, 4))
    p.append(g.place(stat("Total bandwidth", [
        ("sum(rate(ebof_namespace_read_bytes_total" + z + R + ")) + sum(rate(ebof_namespace_written_bytes_total" + z + R + "))", "")],
        "Bps"), 6, 4))
    p.append(g.place(table("Boxes", [
        ('up{job=~"ebof.*",zone=~"$zone"}', "up"),
        ("ebof_build_info" + z, "version"),
        ("ebof_connections_open" + z, "connections"),
        ("ebof_subsystems" + z, "subsystems"),
    ], "Every scraped box: up, version, connections, subsystems (zone: a target label set in the scrape configuration)"), 24, 8))
    p.append(g.row("Load per box"))
    p.append(g.place(timeseries("IOPS per box", [
        ("sum by (instance) (rate(ebof_namespace_read_commands_total" + z + R + ") + rate(ebof_namespace_write_commands_total" + z + R + "))", "{{instance}}"),
    ], "iops"), 8, 8))
    p.append(g.place(timeseries("Bandwidth per box", [
        ("sum by (instance) (rate(ebof_namespace_read_bytes_total" + z + R + ") + rate(ebof_namespace_written_bytes_total" + z + R + "))", "{{instance}}"),
    ], "Bps"), 8, 8))
    p.append(g.place(timeseries("Write p99 per box", [
        ("histogram_quantile(0.99, sum by (instance, le) (rate(ebof_namespace_write_latency_seconds_bucket" + z + R + ")))", "{{instance}}"),
    ], "s"), 8, 8))
    p.append(g.place(timeseries("IOPS per zone", [
        ("sum by (zone) (rate(ebof_namespace_read_commands_total" + z + R + ") + rate(ebof_namespace_write_commands_total" + z + R + "))", "{{zone}}"),
    ], "iops"), 12, 8))
    p.append(g.place(timeseries("Errors per box", [
        ("sum by (instance) (rate(ebof_namespace_backend_errors_total" + z + R + "))", "backend {{instance}}"),
        ("sum by (instance) (rate(ebof_auth_failures_total" + z + R + ") + rate(ebof_tls_failures_total" + z + R + "))", "auth/TLS {{instance}}"),
        ("sum by (instance) (rate(ebof_keep_alive_expiries_total" + z + R + "))", "keep-alive {{instance}}"),
    ], "short"), 12, 8))
    p.append(g.row("Capacity"))
    p.append(g.place(timeseries("Pool free share per box", [
        ("ebof_pool_free_bytes" + z + " / ebof_pool_capacity_bytes" + z, "{{instance}} {{pool}}"),
    ], "percentunit"), 12, 8))
    p.append(g.place(timeseries("Pool usage, all boxes", [
        ("sum by (zone) (ebof_pool_capacity_bytes" + z + ")", "capacity {{zone}}"),
        ("sum by (zone) (ebof_pool_provisioned_bytes" + z + ")", "provisioned {{zone}}"),
        ("sum by (zone) (ebof_pool_used_bytes" + z + ")", "used {{zone}}"),
    ], "bytes"), 12, 8))
    p.append(g.row("Discovery"))
    p.append(g.place(table("CDC members", [
        ("ebof_cdc_member_up" + z, "up"),
        ("ebof_cdc_member_entries" + z, "entries"),
        ("ebof_cdc_member_announced" + z, "announced"),
    ], "Each Central Discovery Controller's members: connection up, entries, announced by DIM"), 16, 8))
    p.append(g.place(timeseries("CDC hosts and DIM registrations", [
        ("ebof_cdc_hosts" + z, "hosts {{instance}}"),
        ("ebof_dim_registrations" + z, "DIM registrations {{instance}}"),
    ], "short"), 8, 8))
    p.append(g.row("Replication"))
    p.append(g.place(table("Mirrors", [
        ("ebof_mirror_role" + z, "role"),
        ("ebof_mirror_in_sync" + z, "in sync"),
        ("ebof_mirror_fenced" + z, "fenced"),
        ("ebof_mirror_resync_bytes_left" + z, "resync bytes left"),
    ], "Every mirrored namespace on every box (role 1 primary, 2 secondary)"), 12, 8))
    p.append(g.place(timeseries("Resync left per box", [
        ("sum by (instance) (ebof_mirror_resync_bytes_left" + z + ")", "{{instance}}"),
    ], "bytes"), 12, 8))
    variables = [variable("zone", "label_values(ebof_build_info, zone)", "Zone")]
    return dashboard("ebof-fleet", "ebof / fleet", "Every ebof box: up, load, errors, capacity, CDC members, replication",
                     p, variables)


def prometheus_rule():
    rules = (HERE / "ebof-alerts.yml").read_text()
    body = rules[rules.index("groups:"):]
    indented = "".join("  " + l if l.strip() else l for l in body.splitlines(keepends=True))
    return (
        "# Generated by deploy/monitoring/generate.py from ebof-alerts.yml: edit that file and run\n"
        "# generate.py (scripts/check-monitoring.sh fails when this copy differs).\n"
        "apiVersion: monitoring.coreos.com/v1\n"
        "kind: PrometheusRule\n"
        "metadata:\n"
        "  name: ebof\n"
        "  labels:\n"
        "    app.kubernetes.io/name: ebof\n"
        "spec:\n" + indented
    )


def outputs():
    return {
        "dashboards/ebof-box.json": json.dumps(box_dashboard(), indent=2) + "\n",
        "dashboards/ebof-fleet.json": json.dumps(fleet_dashboard(), indent=2) + "\n",
        "prometheus-rule.yaml": prometheus_rule(),
    }


def main():
    check = "--check" in sys.argv[1:]
    bad = []
    for name, text in outputs().items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                bad.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if bad:
        print("deploy/monitoring: out of date (run deploy/monitoring/generate.py): " + ", ".join(bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
