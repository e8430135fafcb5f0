"""The containers of one pod never get overlapping MIG placements (issue #17 item 2).

kubelet's device manager allocates every container of a pod, init containers included,
when it admits the pod, and a dynamic MIG instance lives until its pod is gone
(docs/sharing-modes.md, "What the container gets"): an init container's instance still
exists while the app containers run. Init containers were fitted against the node's usage
without the pod's own instances, so an init container's ``1g.10gb`` at slice 6 and an app
container's ``3g.40gb`` at slices 4-7 were both chosen, and the device plugin could not
create the second one (NVML refuses a placement that overlaps a live instance).
"""

import itertools

import yaml

from hami_core.simulate.report import build_report
from tests.simulate.helpers import EXAMPLES, run


def _mig_cluster():
    doc = yaml.safe_load((EXAMPLES / "cluster-modes.yaml").read_text())
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] == "mig-node"]
    return doc


def _pod(name, inits, apps):
    def c(n, profile):
        return {
            "name": n,
            "image": "busybox",
            "resources": {"limits": {f"nvidia.com/mig-{profile}": "1"}},
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "initContainers": [c(f"i{k}", p) for k, p in enumerate(inits)],
            "containers": [c(f"a{k}", p) for k, p in enumerate(apps)],
        },
    }


def _slices(device):
    start, size = device["migPlacement"]["start"], device["migPlacement"]["size"]
    return set(range(start, start + size))


def _assert_disjoint(report):
    devices = [d for d in report["devices"] if d["migPlacement"]]
    for a, b in itertools.combinations(devices, 2):
        if a["uuid"] == b["uuid"]:
            assert not _slices(a) & _slices(b), (a, b)


def test_an_init_containers_instance_is_not_overlapped_by_the_apps():
    (report,) = build_report(run(_mig_cluster(), [_pod("p", ["1g.10gb"], ["3g.40gb"])]))["pods"]
    assert report["status"] == "placed"
    assert [d["migProfile"] for d in report["devices"]] == ["1g.10gb", "3g.40gb"]
    _assert_disjoint(report)


def test_sequential_init_containers_get_disjoint_instances():
    (report,) = build_report(run(_mig_cluster(), [_pod("p", ["1g.10gb", "3g.40gb"], ["2g.20gb"])]))[
        "pods"
    ]
    assert report["status"] == "placed"
    _assert_disjoint(report)


def test_a_pod_whose_instances_cannot_all_exist_at_once_does_not_fit():
    """7g.80gb covers the whole GPU: an init container holding it leaves no placement for
    an app container (before, the init's peak let both "fit")."""
    (report,) = build_report(run(_mig_cluster(), [_pod("p", ["7g.80gb"], ["1g.10gb"])]))["pods"]
    assert report["status"] == "unschedulable"


def test_every_mix_of_profiles_gives_disjoint_placements():
    profiles = ["1g.10gb", "2g.20gb", "3g.40gb"]
    for inits, apps in itertools.product(
        itertools.product(profiles, repeat=2), itertools.product(profiles, repeat=1)
    ):
        (report,) = build_report(run(_mig_cluster(), [_pod("p", list(inits), list(apps))]))["pods"]
        if report["status"] == "placed":
            _assert_disjoint(report)
