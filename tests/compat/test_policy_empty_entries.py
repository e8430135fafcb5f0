"""An empty entry of a policy list (``spread,``, ``spread,,numa``) names nothing.

HAMi 2.10 reads ``hami.io/gpu-scheduler-policy`` as a comma list and compares each
trimmed entry (``pkg/util/util.go::PolicyContains``), so a trailing comma is harmless
there: a pod written for HAMi with one is admitted here with the same meaning. A list
naming nothing at all (``,``) is still denied (``test_hami_semantics``).
"""

import pytest

from hami_core.model import DevicePolicy, DevicePolicyChain
from tests.builders import container, pod
from tests.unit.test_admission import review

POLICY = "hami.io/gpu-scheduler-policy"


@pytest.mark.parametrize(
    ("value", "primary", "ties"),
    [
        ("spread,", DevicePolicy.SPREAD, ()),
        ("binpack,,numa", DevicePolicy.BINPACK, (DevicePolicy.NUMA,)),
        (" , numa", DevicePolicy.NUMA, ()),
    ],
)
def test_empty_entries_are_skipped(value, primary, ties):
    chain = DevicePolicyChain.parse(value)
    assert (chain.primary, chain.tie_breaks, chain.mutex) == (primary, ties, False)
    assert review(pod("p", container(gpu=1), annotations={POLICY: value})).allowed


def test_an_unknown_token_beside_an_empty_entry_is_still_denied():
    out = review(pod("p", container(gpu=1), annotations={POLICY: "spread,,fastest"}))
    assert not out.allowed and "'fastest'" in out.message
