#!/usr/bin/python3
"""Renders deploy/k8s/overlays/{gpu,cpu} with `kubectl kustomize` and checks what matters.

- The replicas: probes (startup, readiness, liveness) are grpc.health.v1 on the port kvserve
  listens on; the startup budget covers a model load; the grace period exceeds
  --shutdown-grace-seconds; non-root with a read-only root filesystem; each names itself
  (--replica-id from the pod's name); each mounts the prefixes ConfigMap where --prefixes-file
  points and its own state volume (a volumeClaimTemplate) where --state-dir points; metrics
  where the PodMonitor scrapes.
- The gpu overlay requests a GPU and runs the CUDA image; the cpu overlay requests none.
- The headless Service, the PodDisruptionBudget and the PodMonitor select the replicas.
- The gateway: its nginx.conf is what deploy/gateway/render.py makes from the template (no
  drift), its upstream lists exactly the StatefulSet's pods, its probes and Service point at
  the ports it listens on.
Exits 77 (ctest: skipped) with the reason when kubectl or PyYAML is absent.

  /usr/bin/python3 tests/e2e/test_k8s_manifests.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
K8S = os.path.join(ROOT, "deploy", "k8s")
OVERLAYS = ("gpu", "cpu")
SKIP_EXIT_CODE = 77
# Seconds the startup probe must allow before the first SERVING: loading the weights and
# prefilling the prefixes file.
MIN_STARTUP_BUDGET_S = {"gpu": 1200, "cpu": 300}

try:
    import yaml
except ImportError:
    yaml = None

KUBECTL = shutil.which("kubectl")
RENDERED = {}  # overlay -> list of objects


def render(overlay):
    if overlay not in RENDERED:
        done = subprocess.run([KUBECTL, "kustomize", os.path.join(K8S, "overlays", overlay)],
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise AssertionError(f"kubectl kustomize overlays/{overlay} failed:\n{done.stderr}")
        RENDERED[overlay] = [o for o in yaml.safe_load_all(done.stdout) if o]
    return RENDERED[overlay]


def find(objects, kind, name=None, prefix=None):
    """The one object of `kind` named `name` (or whose name starts with `prefix`)."""
    found = [o for o in objects if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name) and
             (prefix is None or o["metadata"]["name"].startswith(prefix))]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or prefix or ''}, found {len(found)}")
    return found[0]


def flag(args, name):
    """The value of --name=VALUE or --name VALUE in `args`; None when absent."""
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(args):
            return args[i + 1]
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def container_port(container, name):
    for port in container.get("ports", []):
        if port.get("name") == name:
            return port["containerPort"]
    raise AssertionError(f"container {container['name']} has no port named {name}")


def probe_port(container, probe):
    """The port of a probe, a named port resolved."""
    spec = container[probe]
    handler = spec.get("grpc") or spec.get("httpGet") or spec.get("tcpSocket")
    port = handler["port"]
    return container_port(container, port) if isinstance(port, str) else port


class ManifestTest(unittest.TestCase):
    """One test per concern, each over both overlays."""

    def replica(self, overlay):
        objects = render(overlay)
        statefulset = find(objects, "StatefulSet", "kvserve")
        pod = statefulset["spec"]["template"]["spec"]
        (container,) = [c for c in pod["containers"] if c["name"] == "kvserve"]
        return objects, statefulset, pod, container

    def test_probes_are_grpc_health_on_the_listen_port(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                _, _, _, container = self.replica(overlay)
                args = container["args"]
                listen_port = port_of(flag(args, "listen"))
                self.assertEqual(container_port(container, "grpc"), listen_port)
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertIn("grpc", container[probe], probe)
                    # The empty service name: the server as a whole.
                    self.assertEqual(container[probe]["grpc"].get("service", ""), "", probe)
                    self.assertEqual(probe_port(container, probe), listen_port, probe)
                startup = container["startupProbe"]
                budget = (startup.get("initialDelaySeconds", 0) +
                          startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3))
                self.assertGreaterEqual(budget, MIN_STARTUP_BUDGET_S[overlay])

    def test_grace_period_exceeds_the_drain_time(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                _, _, pod, container = self.replica(overlay)
                drain_s = int(flag(container["args"], "shutdown-grace-seconds") or 30)
                self.assertGreater(pod.get("terminationGracePeriodSeconds", 30), drain_s)

    def test_gpu_overlay_requests_a_gpu_and_cpu_does_not(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                objects, _, _, container = self.replica(overlay)
                resources = container.get("resources", {})
                gpus = {part: resources.get(part, {}).get("nvidia.com/gpu")
                        for part in ("requests", "limits")}
                if overlay == "gpu":
                    self.assertEqual(str(gpus["limits"]), "1")
                    self.assertTrue(container["image"].endswith(":runtime-cuda"))
                    self.assertTrue(flag(container["args"], "device").startswith("cuda"))
                else:
                    self.assertEqual(gpus, {"requests": None, "limits": None})
                    self.assertTrue(container["image"].endswith(":runtime-cpu"))
                    self.assertIsNone(flag(container["args"], "device"))
                # No other container anywhere asks for one.
                for o in objects:
                    if o["kind"] in ("Deployment", "StatefulSet"):
                        for c in o["spec"]["template"]["spec"]["containers"]:
                            if c is not container:
                                self.assertNotIn("nvidia.com/gpu", str(c.get("resources")))

    def test_every_replica_mounts_the_prefixes_and_its_own_state(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                objects, statefulset, pod, container = self.replica(overlay)
                args = container["args"]
                mounts = {m["name"]: m for m in container["volumeMounts"]}
                volumes = {v["name"]: v for v in pod["volumes"]}
                # --prefixes-file is a key of the prefixes ConfigMap, mounted read-only.
                prefixes_file = flag(args, "prefixes-file")
                (name,) = [n for n, m in mounts.items()
                           if prefixes_file.startswith(m["mountPath"].rstrip("/") + "/")]
                self.assertTrue(mounts[name].get("readOnly"))
                config_map = find(objects, "ConfigMap", volumes[name]["configMap"]["name"])
                key = prefixes_file[len(mounts[name]["mountPath"].rstrip("/")) + 1:]
                self.assertIn(key, config_map["data"])
                names = [p["name"] for p in yaml.safe_load(config_map["data"][key])["prefixes"]]
                self.assertTrue(names)
                # --state-dir is a volume of the replica's own: a claim template, not a volume
                # the pods share.
                state_dir = flag(args, "state-dir")
                (state,) = [n for n, m in mounts.items() if m["mountPath"] == state_dir]
                self.assertNotIn(state, volumes)
                claims = {c["metadata"]["name"]: c
                          for c in statefulset["spec"]["volumeClaimTemplates"]}
                self.assertIn(state, claims)
                self.assertIn("ReadWriteOnce", claims[state]["spec"]["accessModes"])
                # Each replica names itself after its pod.
                self.assertEqual(flag(args, "replica-id"), "$(POD_NAME)")
                env = {e["name"]: e for e in container["env"]}
                self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                                 "metadata.name")

    def test_replicas_run_unprivileged_on_a_read_only_root(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                objects = render(overlay)
                for kind, name in (("StatefulSet", "kvserve"), ("Deployment", "kvserve-gateway")):
                    pod = find(objects, kind, name)["spec"]["template"]["spec"]
                    self.assertTrue(pod["securityContext"]["runAsNonRoot"], name)
                    self.assertNotEqual(pod["securityContext"].get("runAsUser"), 0, name)
                    for container in pod["containers"]:
                        context = container["securityContext"]
                        self.assertTrue(context["readOnlyRootFilesystem"], name)
                        self.assertFalse(context["allowPrivilegeEscalation"], name)

    def test_services_budget_and_monitor_select_the_replicas(self):
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                objects, statefulset, pod, container = self.replica(overlay)
                labels = statefulset["spec"]["template"]["metadata"]["labels"]
                headless = find(objects, "Service", statefulset["spec"]["serviceName"])
                self.assertEqual(headless["spec"]["clusterIP"], "None")
                self.assertTrue(selects({"matchLabels": headless["spec"]["selector"]}, labels))
                self.assertTrue(selects(statefulset["spec"]["selector"], labels))
                self.assertTrue(selects(find(objects, "PodDisruptionBudget", "kvserve")
                                        ["spec"]["selector"], labels))
                monitor = find(objects, "PodMonitor", "kvserve")
                self.assertTrue(selects(monitor["spec"]["selector"], labels))
                (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
                self.assertEqual(container_port(container, endpoint["port"]),
                                 port_of(flag(container["args"], "metrics-listen")))

    def test_gateway_config_is_the_rendered_template_for_the_statefulset(self):
        # The committed rendering is what render.sh makes now.
        with tempfile.TemporaryDirectory() as tmp:
            fresh = os.path.join(tmp, "nginx.conf")
            subprocess.run(["/bin/sh", os.path.join(K8S, "base", "gateway", "render.sh"),
                            "--out", fresh], check=True, timeout=60)
            with open(fresh, encoding="utf-8") as f:
                rendered = f.read()
        for overlay in OVERLAYS:
            with self.subTest(overlay=overlay):
                objects, statefulset, _, container = self.replica(overlay)
                deployment = find(objects, "Deployment", "kvserve-gateway")
                pod = deployment["spec"]["template"]["spec"]
                (nginx,) = pod["containers"]
                (config_volume,) = [v for v in pod["volumes"] if "configMap" in v]
                config = find(objects, "ConfigMap", config_volume["configMap"]["name"])
                conf = config["data"]["nginx.conf"]
                self.assertEqual(conf, rendered, "run deploy/k8s/base/gateway/render.sh")
                self.assertIn("entrypoint.sh", config["data"])
                # Its upstream is the StatefulSet's pods, by their stable names, on the gRPC port.
                grpc_conf, http_conf = conf.split("upstream kvserve_http")
                servers = re.findall(r"^\s*server (\S+) max_fails=", grpc_conf, re.M)
                spec = statefulset["spec"]
                grpc_port = container_port(container, "grpc")
                self.assertEqual(servers, [f"{statefulset['metadata']['name']}-{i}."
                                           f"{spec['serviceName']}:{grpc_port}"
                                           for i in range(spec["replicas"])])
                # The OpenAI-compatible HTTP API: the same pods on their HTTP port.
                http_servers = re.findall(r"^\s*server (\S+) max_fails=", http_conf, re.M)
                http_port = container_port(container, "http")
                self.assertIn(f"--http-listen=0.0.0.0:{http_port}", container["args"])
                self.assertEqual(http_servers, [f"{statefulset['metadata']['name']}-{i}."
                                                f"{spec['serviceName']}:{http_port}"
                                                for i in range(spec["replicas"])])
                self.assertIn("hash $http_x_kvserve_route consistent;", conf)
                # It listens where its ports, probes and Service say.
                listen = re.search(r"^\s*listen (\S+) http2;", conf, re.M).group(1)
                self.assertEqual(container_port(nginx, "grpc"), int(listen.rsplit(":", 1)[-1]))
                http_listen, health = re.findall(r"^\s*listen (\S+);", conf, re.M)
                self.assertEqual(container_port(nginx, "http"),
                                 int(http_listen.rsplit(":", 1)[-1]))
                for probe in ("readinessProbe", "livenessProbe"):
                    self.assertEqual(nginx[probe]["httpGet"]["path"], "/healthz")
                    self.assertEqual(probe_port(nginx, probe), int(health.rsplit(":", 1)[-1]))
                service = find(objects, "Service", "kvserve")
                self.assertTrue(selects({"matchLabels": service["spec"]["selector"]},
                                        deployment["spec"]["template"]["metadata"]["labels"]))
                ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
                self.assertEqual(ports, {"grpc": "grpc", "http": "http"})
                # The entrypoint gets the mounted configuration and a writable runtime dir.
                mount = {m["name"]: m["mountPath"] for m in nginx["volumeMounts"]}
                self.assertEqual(nginx["command"][-2],
                                 mount[config_volume["name"]].rstrip("/") + "/nginx.conf")
                runtime_dir = re.search(r"^pid (\S+)/nginx\.pid;", conf, re.M).group(1)
                self.assertEqual(nginx["command"][-1], runtime_dir)
                self.assertTrue(any(runtime_dir.startswith(p.rstrip("/") + "/")
                                    for n, p in mount.items() if n != config_volume["name"]))


def main():
    missing = [why for why, absent in (
        ("kubectl is not installed", KUBECTL is None),
        ("PyYAML (python3-yaml) is not installed", yaml is None)) if absent]
    if missing:
        print(f"SKIPPED: {'; '.join(missing)}")
        return SKIP_EXIT_CODE
    result = unittest.main(argv=sys.argv, exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
