"""Every resource a backend reads, written as a pod annotation, is denied (issue #15
item 5's whole kind): not only the sharing resources but the ones a backend reads beyond
them (``DeviceTypeInfo.other_resources``): ``nvidia.com/priority`` (HAMi's task priority,
read from ``resources.limits``) and the NVIDIA device plugin's ``nvidia.com/mig-<profile>``.
As annotations nobody reads them: the pod would silently run at no priority or on a
shared GPU instead of a MIG instance."""

import pytest

from tests.builders import container, pod
from tests.unit.test_admission import review


@pytest.mark.parametrize("key", ["nvidia.com/priority", "nvidia.com/mig-1g.10gb"])
def test_other_resources_as_annotations_are_denied_naming_them(key):
    out = review(pod("p", container(gpu=1, gpumem=1000), annotations={key: "1"}))
    assert not out.allowed
    assert key in out.message and "resources.limits" in out.message


def test_hami_annotations_of_the_same_domain_pass():
    ann = {"nvidia.com/use-gputype": "A100", "nvidia.com/vgpu-mode": "hami-core"}
    assert review(pod("p", container(gpu=1, gpumem=1000), annotations=ann)).allowed
