"""The backend conformance kit, for every Ascend model whose requests keep their count.

910C (``Ascend910C``) is left out: a request of 1 takes a module of 2 chips, while the
kit asserts that a sample request of 1 parses as 1 (``test_parse_request``); its module
pairing is tested in ``test_fit`` / ``test_requests`` / ``test_pipeline``.
"""

from typing import Any, ClassVar

from hami_ascend.models import DEFAULT_MODELS

from hami_core.model import DeviceTypeInfo
from hami_core.plugin import BackendManager
from hami_core.testing import BackendConformance


class AscendConformance(BackendConformance):
    backend_name = "ascend"
    vendor: ClassVar[str] = ""

    def device_type(self, manager: BackendManager) -> DeviceTypeInfo:
        return next(t for t in manager.infos["ascend"].device_types if t.vendor == self.vendor)


def _kit(vendor: str, memory_mib: int) -> type[Any]:
    return type(
        f"TestAscendConformance_{vendor.replace('-', '_')}",
        (AscendConformance,),
        {"vendor": vendor, "device_memory_mib": memory_mib},
    )


for _m in DEFAULT_MODELS:
    if _m.chips_per_module == 1:
        globals()[f"TestAscend_{_m.vendor.replace('-', '_')}"] = _kit(
            _m.vendor, _m.memory_allocatable_mib
        )
