"""The native-sidecar pods of ``test_sidecar_rule`` checked against Kubernetes' own
schemas (kubernetes-validate's bundled OpenAPI, strict: unknown fields refused).

They are valid Pods from 1.28, the release that added ``restartPolicy`` to a container
(KEP-753); every schema before it refuses the field, as kube-apiserver 1.20 (this
project's real tier) drops it when decoding: ``tests/e2e/test_kubelet.py`` shows what
that cluster then does with such a pod (docs/PROTOCOL.md §1). The schema types the
field as a string only: the value check is the API server's validation, which the
webhook repeats (``test_a_bogus_restart_policy_on_an_init_container_is_denied``).
"""

from pathlib import Path

import kubernetes_validate
import pytest
from packaging.version import Version

from tests.builders import container, pod

SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
VERSIONS = sorted(
    {p.name[1:].split("-")[0] for p in SCHEMAS.iterdir() if p.name.endswith("-local-strict")},
    key=Version,
)
FIRST_WITH_SIDECARS = Version("1.28.0")


def _sidecar_pod():
    side = container("side", gpu=1, gpumem=6000)
    side["restartPolicy"] = "Always"
    return pod(
        "p",
        container("app", gpu=1, gpumem=6000),
        init=[container("early", gpu=1, gpumem=2000), side, container("late", gpu=1, gpumem=8000)],
    )


def test_the_schemas_span_both_sides_of_1_28():
    assert Version(VERSIONS[0]) < FIRST_WITH_SIDECARS <= Version(VERSIONS[-1])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sidecar_pod_is_valid_exactly_from_1_28(version):
    if Version(version) >= FIRST_WITH_SIDECARS:
        kubernetes_validate.validate(_sidecar_pod(), version, strict=True)
    else:
        with pytest.raises(
            kubernetes_validate.ValidationError, match="'restartPolicy' was unexpected"
        ):
            kubernetes_validate.validate(_sidecar_pod(), version, strict=True)
