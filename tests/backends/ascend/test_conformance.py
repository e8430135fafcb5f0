"""The backend conformance kit, for every Ascend model.

910C (``Ascend910C``) takes whole modules of 2 chips: a request of 1 parses as 2
(``expected_count``) and memory slices are refused, so its sample container asks for
whole chips (no memory resource). Module pairing beyond the kit is tested in
``test_fit`` / ``test_requests`` / ``test_pipeline``.
"""

from typing import Any, ClassVar

from hami_ascend.models import DEFAULT_MODELS, ModelSpec

from hami_core.model import DeviceTypeInfo
from hami_core.plugin import BackendManager
from hami_core.testing import BackendConformance


class AscendConformance(BackendConformance):
    backend_name = "ascend"
    model: ClassVar[ModelSpec]

    def device_type(self, manager: BackendManager) -> DeviceTypeInfo:
        return next(
            t for t in manager.infos["ascend"].device_types if t.vendor == self.model.vendor
        )

    def expected_count(self, requested: int) -> int:
        n = self.model.chips_per_module
        return -(-requested // n) * n  # whole modules: 1 -> 2 on a 910C

    def sample_container(
        self, dtype: DeviceTypeInfo, *, count: int, memory_mib: int
    ) -> dict[str, Any]:
        if self.model.chips_per_module == 1:
            return super().sample_container(dtype, count=count, memory_mib=memory_mib)
        limits = {dtype.resources.count: str(count)}  # whole chips: 910C has no slices
        return {"name": "main", "image": "busybox", "resources": {"limits": limits}}


def _kit(model: ModelSpec) -> type[Any]:
    return type(
        f"TestAscend_{model.vendor.replace('-', '_')}",
        (AscendConformance,),
        {"model": model, "device_memory_mib": model.memory_allocatable_mib},
    )


for _m in DEFAULT_MODELS:
    globals()[f"TestAscend_{_m.vendor.replace('-', '_')}"] = _kit(_m)


def test_the_kit_runs_for_every_model_including_910c() -> None:
    kits = {v.model.vendor for k, v in globals().items() if k.startswith("TestAscend_")}
    assert kits == {m.vendor for m in DEFAULT_MODELS}
    assert "Ascend910C" in kits
