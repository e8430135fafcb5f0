"""hami-iluvatar: the Iluvatar CoreX backend of hami (entry point ``iluvatar``).

One vendor key per chip, as HAMi 2.10's ``iluvatars`` list: ``MR-V100``, ``MR-V50``,
``BI-V150``, ``BI-V100``; resources ``iluvatar.ai/<chip>-vgpu``, ``iluvatar.ai/<chip>.vMem``
(unit 256 MiB), ``iluvatar.ai/<chip>.vCore`` (percent); inventory
``hami.io/node-<chip>-register`` in the legacy colon form (PROTOCOL.md §1b, HAMi
``pkg/device/iluvatar/device.go``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-iluvatar")

BACKEND_NAME = "iluvatar"
#: The chips of HAMi's default ``iluvatars`` configuration (chart ``device-configmap.yaml``);
#: each is a vendor key (HAMi's ``commonWord``).
CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")

__all__ = ["BACKEND_NAME", "CHIPS", "__version__"]
