"""charts/hami against the real kube-apiserver 1.20.2 (no install; see test_helm_install.py):

- every example values file, rendered by real Helm with the cluster's capabilities, is
  accepted by the API server's own validation (``kubectl apply --dry-run=server``);
- the KubeSchedulerConfiguration it renders for this cluster (v1beta1, image tag
  v1.20.2) is accepted by the real kube-scheduler 1.20.2;
- the RBAC it grants, once created, lets each component do its job and nothing near it:
  checked with SubjectAccessReviews (the API server's authorizer), including the tenant
  moves (other Secrets, other webhook configurations, other Leases, deleting pods).
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.chart.helm import CHART, EXAMPLES, example_values, find, objects
from tests.chart.helm import render as render_offline
from tests.e2e.controlplane import ControlPlane, free_port

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

# cert-manager's two kinds the chart uses, with the parts of cert-manager's own schema
# the chart fills (spec.secretName and spec.issuerRef required, as cert-manager's CRD
# says); cert-manager itself cannot be fetched here.
CERT_MANAGER_CRDS = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }
    for plural, kind, schema in (
        (
            "issuers",
            "Issuer",
            {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "selfSigned": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            },
        ),
        (
            "certificates",
            "Certificate",
            {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "required": ["secretName", "issuerRef"],
                        "properties": {
                            "secretName": {"type": "string"},
                            "duration": {"type": "string"},
                            "dnsNames": {"type": "array", "items": {"type": "string"}},
                            "ipAddresses": {"type": "array", "items": {"type": "string"}},
                            "issuerRef": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "kind": {"type": "string"},
                                    "group": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            },
        ),
    )
]


class Cluster:
    def __init__(self, cp: ControlPlane, kube_bin: Path, work: Path) -> None:
        self.cp = cp
        self.kubectl = str(kube_bin / "kubectl")
        self.kube_scheduler = str(kube_bin / "kube-scheduler")
        self.work = work
        self.namespace = f"chart-{uuid.uuid4().hex[:6]}"
        self.helm = helm_python.Config(
            kubeconfig_path=str(cp.kubeconfig_path), namespace=self.namespace
        )

    def render(self, values: dict[str, Any]) -> dict[str, str]:
        """Render with the cluster's capabilities (its version, its API groups): what
        ``helm install --dry-run=server`` sends, as {path: manifest}."""
        chart = helm_python.Chart.load(CHART)
        release = self.helm.install(
            chart, "hami", values, namespace=self.namespace, dry_run="server"
        )
        return {"manifest": release["manifest"]}

    def apply(
        self, manifests: dict[str, str], *, dry_run: bool
    ) -> subprocess.CompletedProcess[str]:
        path = self.work / f"manifests-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump_all(objects(manifests)))
        argv = [
            self.kubectl,
            f"--kubeconfig={self.cp.kubeconfig_path}",
            "apply",
            "-n",
            self.namespace,
            "-f",
            str(path),
        ]
        if dry_run:
            argv.append("--dry-run=server")
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane, kube_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
):
    c = Cluster(control_plane, kube_bin_dir, tmp_path_factory.mktemp("chart"))
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace({"metadata": {"name": c.namespace}})
    ext = client.ApiextensionsV1Api(control_plane.api_client())
    for crd in CERT_MANAGER_CRDS:
        with contextlib.suppress(ApiException):
            ext.create_custom_resource_definition(crd)

    def established() -> bool:
        try:
            client.CustomObjectsApi(control_plane.api_client()).list_namespaced_custom_object(
                "cert-manager.io", "v1", c.namespace, "certificates"
            )
            return True
        except ApiException:
            return False

    control_plane.wait_for(established, timeout=60, message="cert-manager's CRDs served")
    yield c
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        api = client.RbacAuthorizationV1Api(control_plane.api_client())
        for prefix in ("hami-scheduler", "hami-webhook", "hami-device-plugin"):
            for suffix in ("", "-kube-scheduler", "-volume-scheduler"):
                with contextlib.suppress(ApiException):
                    getattr(
                        api,
                        f"delete_{'cluster_role_binding' if kind == 'ClusterRoleBinding' else 'cluster_role'}",
                    )(prefix + suffix)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_accepted_by_the_api_server(cluster: Cluster, example: Path):
    manifests = cluster.render(example_values(example))
    objs = objects(manifests)
    assert len(objs) > 10
    result = cluster.apply(manifests, dry_run=True)
    assert result.returncode == 0, f"{example.name}:\n{result.stderr}\n{result.stdout}"
    assert "(server dry run)" in result.stdout
    created = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(created) == len(objs), result.stdout


def test_the_api_server_refuses_what_helm_would_let_through(cluster: Cluster):
    # The dry-run is a real check: a manifest the API server rejects fails it.
    manifests = cluster.render({})
    broken = {
        k: v.replace("failurePolicy: Ignore", "failurePolicy: Sometimes")
        for k, v in manifests.items()
    }
    result = cluster.apply(broken, dry_run=True)
    assert result.returncode != 0
    assert "failurePolicy" in result.stderr


def test_this_cluster_gets_v1beta1_and_its_own_kube_scheduler(cluster: Cluster, tmp_path: Path):
    objs = objects(cluster.render({}))
    config_text = find(objs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"]
    config = yaml.safe_load(config_text)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta1"
    deploy = find(objs, "Deployment", "hami-scheduler")
    images = {c["name"]: c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]}
    assert images["kube-scheduler"] == "registry.k8s.io/kube-scheduler:v1.20.2"

    # The real kube-scheduler 1.20.2 parses and validates it (and exits), run with the
    # chart's own flags; only the healthz port is moved to a free one and a kubeconfig
    # stands in for the pod's service account.
    assert config["healthzBindAddress"] == "0.0.0.0:10359"
    config_text = config_text.replace("0.0.0.0:10359", f"127.0.0.1:{free_port()}")
    config_text += f"clientConnection:\n  kubeconfig: {cluster.cp.kubeconfig_path}\n"
    flags = [
        a
        for a in deploy["spec"]["template"]["spec"]["containers"][0]["command"][1:]
        if not a.startswith("--config=")
    ]
    assert flags[:2] == ["--port=0", "--secure-port=0"]
    path = tmp_path / "config.yaml"
    path.write_text(config_text)
    out = tmp_path / "effective.yaml"
    proc = subprocess.run(
        [cluster.kube_scheduler, f"--config={path}", *flags, f"--write-config-to={out}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    effective = yaml.safe_load(out.read_text())
    (extender,) = effective["extenders"]
    assert extender["nodeCacheCapable"] is True
    assert extender["httpTimeout"] == "30s"
    assert {m["name"] for m in extender["managedResources"]} >= {
        "nvidia.com/gpu",
        "nvidia.com/gpumem",
    }
    assert effective["leaderElection"]["resourceName"] == "hami-scheduler"

    # ... and refuses a broken one, so the check above can fail.
    path.write_text(config_text.replace("nodeCacheCapable: true", "nodeCacheCapable: maybe"))
    bad = subprocess.run(
        [cluster.kube_scheduler, f"--config={path}", *flags, f"--write-config-to={out}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0
    assert "nodeCacheCapable" in bad.stderr or "bool" in bad.stderr


def _can(
    cluster: Cluster,
    sa: str,
    verb: str,
    resource: str,
    *,
    name: str = "",
    group: str = "",
    namespace: str | None = None,
) -> bool:
    api = client.AuthorizationV1Api(cluster.cp.api_client())
    review = api.create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{cluster.namespace}:{sa}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{cluster.namespace}"],
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource.split("/")[0],
                    "subresource": resource.split("/")[1] if "/" in resource else "",
                    "group": group,
                    "name": name,
                    "namespace": cluster.namespace if namespace is None else namespace,
                },
            },
        }
    )
    return bool(review.status.allowed)


def test_least_privilege_rbac_as_the_api_server_authorizes_it(cluster: Cluster):
    manifests = cluster.render({})
    rbac_kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    rbac = [o for o in objects(manifests) if o["kind"] in rbac_kinds]
    assert len(rbac) >= 12
    result = cluster.apply({"rbac": yaml.safe_dump_all(rbac)}, dry_run=False)
    assert result.returncode == 0, result.stderr

    wh, sch, dp = "hami-webhook", "hami-scheduler", "hami-device-plugin"
    adm = "admissionregistration.k8s.io"
    # the webhook: its own Secret and its own webhook configuration
    assert _can(cluster, wh, "get", "secrets", name="hami-webhook-tls")
    assert _can(cluster, wh, "patch", "secrets", name="hami-webhook-tls")
    assert _can(cluster, wh, "create", "secrets")
    assert _can(
        cluster,
        wh,
        "patch",
        "mutatingwebhookconfigurations",
        name="hami-webhook",
        group=adm,
        namespace="",
    )
    assert _can(cluster, wh, "get", "namespaces", name="default", namespace="")
    assert _can(cluster, wh, "list", "resourcequotas", namespace="")
    # ... and not another tenant's Secret, nor another webhook, nor listing Secrets
    assert not _can(cluster, wh, "get", "secrets", name="someone-elses-token")
    assert not _can(cluster, wh, "list", "secrets")
    assert not _can(cluster, wh, "get", "secrets", name="hami-webhook-tls", namespace="default")
    assert not _can(
        cluster,
        wh,
        "patch",
        "mutatingwebhookconfigurations",
        name="istio-sidecar-injector",
        group=adm,
        namespace="",
    )
    assert not _can(cluster, wh, "patch", "pods", namespace="default")

    # the scheduler pod: bind, annotate, its own Lease only
    assert _can(cluster, sch, "create", "pods/binding", namespace="default")
    assert _can(cluster, sch, "patch", "pods", namespace="default")
    assert _can(cluster, sch, "patch", "nodes", name="gpu-1", namespace="")
    assert _can(
        cluster, sch, "update", "leases", name="hami-scheduler", group="coordination.k8s.io"
    )
    assert not _can(
        cluster,
        sch,
        "update",
        "leases",
        name="kube-controller-manager",
        group="coordination.k8s.io",
        namespace="kube-system",
    )
    assert not _can(cluster, sch, "update", "leases", name="other-app", group="coordination.k8s.io")
    assert not _can(cluster, sch, "get", "secrets", name="hami-webhook-tls")
    # its allocation-signing key (PROTOCOL.md §4a): only that Secret, by name
    assert _can(cluster, sch, "get", "secrets", name="hami-allocation-key")
    assert not _can(cluster, sch, "list", "secrets")
    assert not _can(cluster, sch, "update", "secrets", name="hami-allocation-key")
    assert _can(cluster, sch, "patch", "configmaps", name="hami-allocation-keys")
    assert not _can(cluster, sch, "patch", "configmaps", name="hami-config")
    assert not _can(cluster, sch, "delete", "nodes", name="gpu-1", namespace="")

    # the device plugin: its node and the pods on it; no Secrets, no deleting, no binding
    assert _can(cluster, dp, "patch", "nodes", name="gpu-1", namespace="")
    assert _can(cluster, dp, "list", "pods", namespace="")
    assert _can(cluster, dp, "patch", "pods", namespace="default")
    assert _can(cluster, dp, "get", "namespaces", name="default", namespace="")  # opt-out label
    assert not _can(cluster, dp, "list", "namespaces", namespace="")
    assert not _can(cluster, dp, "patch", "namespaces", name="default", namespace="")
    assert not _can(cluster, dp, "get", "secrets", name="hami-webhook-tls")
    assert not _can(cluster, dp, "get", "secrets", name="hami-allocation-key")
    assert _can(cluster, dp, "get", "configmaps", name="hami-allocation-keys")
    assert not _can(cluster, dp, "get", "configmaps", name="hami-config")
    assert not _can(cluster, dp, "delete", "pods", namespace="default")
    assert not _can(cluster, dp, "create", "pods/binding", namespace="default")
    assert not _can(cluster, dp, "update", "nodes/status", name="gpu-1", namespace="")


def test_what_rbac_on_1_20_can_and_cannot_narrow(cluster: Cluster):
    """Issue 24 item 17, through the real 1.20 authorizer (SubjectAccessReview: what
    ``kubectl auth can-i --as=system:serviceaccount:...`` asks). What is proven: the
    webhook's token reaches no other webhook configuration and cannot create, replace or
    delete its own; the device plugin's and the monitor's reach no subresource that
    would let them set a pod's status or bind it (nor, for the device plugin, evict it).
    What 1.20 RBAC cannot narrow is asserted as such (docs/threat-model.md, "The
    components' own credentials"): the device plugin may patch any pod, in any
    namespace, and any Node, and the monitor evict any pod; RBAC sees neither fields nor
    which node a pod is on, so "only hami.io/ annotations of the pods on my node" needs
    the 1.30+ ValidatingAdmissionPolicies (rbac.admissionPolicies)."""
    # rendered offline (RBAC does not depend on the cluster's version): the test above
    # created these objects without Helm, which a server-side Helm dry run then refuses
    rbac_kinds = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    rbac = [o for o in render_offline({}, namespace=cluster.namespace) if o["kind"] in rbac_kinds]
    result = cluster.apply({"rbac": yaml.safe_dump_all(rbac)}, dry_run=False)
    assert result.returncode == 0, result.stderr

    wh, dp, mon = "hami-webhook", "hami-device-plugin", "hami-monitor"
    adm = "admissionregistration.k8s.io"

    def webhook_can(verb: str, resource: str, name: str = "") -> bool:
        return _can(cluster, wh, verb, resource, name=name, group=adm, namespace="")

    assert webhook_can("patch", "mutatingwebhookconfigurations", "hami-webhook")
    for verb in ("update", "delete"):
        assert not webhook_can(verb, "mutatingwebhookconfigurations", "hami-webhook"), verb
    assert not webhook_can("create", "mutatingwebhookconfigurations")
    assert not webhook_can("list", "mutatingwebhookconfigurations")
    assert not webhook_can("patch", "mutatingwebhookconfigurations", "other-webhook")
    assert not webhook_can("patch", "validatingwebhookconfigurations", "hami-webhook")
    assert not webhook_can("create", "validatingadmissionpolicies")

    # the device plugin and the monitor: no status, binding, ephemeral containers
    for sa in (dp, mon):
        for verb, resource in (
            ("update", "pods/status"),
            ("patch", "pods/status"),
            ("create", "pods/binding"),
            ("patch", "pods/ephemeralcontainers"),
            ("update", "nodes/status"),
        ):
            ns = "" if resource.startswith("nodes") else "default"
            assert not _can(cluster, sa, verb, resource, name="x", namespace=ns), (sa, resource)
    assert not _can(cluster, dp, "create", "pods/eviction", name="x", namespace="default")
    assert not _can(cluster, mon, "patch", "pods", namespace="default")
    assert not _can(cluster, mon, "patch", "nodes", name="gpu-1", namespace="")

    # what RBAC on 1.20 cannot narrow (the documented limit, not a wish)
    assert _can(cluster, dp, "patch", "pods", name="any", namespace="kube-system")
    assert _can(cluster, dp, "patch", "nodes", name="not-its-node", namespace="")
    # the monitor's overuse eviction (hami.io/overuse-policy: evict) reaches any pod
    assert _can(cluster, mon, "create", "pods/eviction", name="any", namespace="kube-system")
    # the scheduler's preemption (docs/preemption-and-gangs.md): it evicts through the
    # Eviction API (budgets asked), nominates and reads budgets; kube-scheduler's own
    # role, bound to the same ServiceAccount for the kube-scheduler container, also
    # allows deleting pods (hami's code never does)
    sched = "hami-scheduler"
    assert _can(cluster, sched, "create", "pods/eviction", name="any", namespace="default")
    assert _can(cluster, sched, "patch", "pods/status", name="any", namespace="default")
    assert _can(cluster, sched, "list", "poddisruptionbudgets", group="policy", namespace="")
    assert _can(cluster, sched, "delete", "pods", name="any", namespace="default")


def test_the_admission_policies_are_refused_by_a_1_20_cluster(cluster: Cluster):
    with pytest.raises(Exception, match="rbac.admissionPolicies.enabled needs Kubernetes 1.30"):
        cluster.render({"rbac": {"admissionPolicies": {"enabled": True}}})
