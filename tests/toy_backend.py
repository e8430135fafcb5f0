"""A minimal backend defined in the tests: proves the kit and the manager generically."""

from __future__ import annotations

from hami_core.model import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceTypeInfo,
    FitResult,
    MutateResult,
    ReasonCode,
    ResourceNames,
)
from hami_core.plugin import hookimpl

RESOURCES = ResourceNames(count="toy.example.com/dev", memory="toy.example.com/mem")
TOY_DEVICE = DeviceInfo(
    uuid="TOY-0", vendor="TOY", model="Toy 1", split_count=4, memory_mib=1000, cores_pct=100
)


class ToyBackend:
    """One vendor ``TOY``: count + memory, first-fit in index order."""

    @staticmethod
    def info(name: str = "toy") -> BackendInfo:
        return BackendInfo(
            name=name,
            device_types=(
                DeviceTypeInfo(
                    vendor="TOY",
                    resources=RESOURCES,
                    register_annotation="hami.io/node-register-toy",
                    handshake_annotation="hami.io/node-handshake-toy",
                    to_allocate_annotation="hami.io/toy-devices-to-allocate",
                    allocated_annotation="hami.io/toy-devices-allocated",
                    allocate_env=("TOY_VISIBLE_DEVICES",),
                ),
            ),
        )

    @hookimpl
    def hami_backend_info(self):
        return self.info()

    @hookimpl
    def hami_parse_request(self, container):
        limits = (container.get("resources") or {}).get("limits") or {}
        if RESOURCES.count not in limits and RESOURCES.memory not in limits:
            return None
        return DeviceRequest(
            vendor="TOY",
            count=int(limits.get(RESOURCES.count, 1)),
            memory_mib=int(limits.get(RESOURCES.memory, 100)),
        )

    @hookimpl
    def hami_mutate(self, container, container_path):
        if self.hami_parse_request(container) is None:
            return None
        ops = []
        if "requests" not in container["resources"]:
            ops.append(
                {
                    "op": "add",
                    "path": f"{container_path}/resources/requests",
                    "value": dict(container["resources"]["limits"]),
                }
            )
        return MutateResult(patch=tuple(ops))

    @hookimpl
    def hami_fit(self, request, usage):
        if len(usage) < request.count:
            return FitResult(node_reason=ReasonCode.NODE_INSUFFICIENT_DEVICE)
        chosen, reasons = [], {}
        for u in usage:
            if not u.device.healthy:
                reasons[u.device.uuid] = ReasonCode.CARD_NOT_HEALTH
            elif u.cordoned:
                reasons[u.device.uuid] = ReasonCode.CARD_CORDONED
            elif u.used_count >= u.device.split_count:
                reasons[u.device.uuid] = ReasonCode.CARD_TIME_SLICING_EXHAUSTED
            elif request.memory_on(u.device) > u.free_memory_mib:
                reasons[u.device.uuid] = ReasonCode.CARD_INSUFFICIENT_MEMORY
            elif len(chosen) < request.count:
                chosen.append(
                    ContainerDevice(
                        uuid=u.device.uuid,
                        vendor="TOY",
                        memory_mib=request.memory_on(u.device),
                        cores_pct=request.cores_pct,
                    )
                )
        if len(chosen) < request.count:
            return FitResult(device_reasons=reasons)
        return FitResult(devices=tuple(chosen))

    @hookimpl
    def hami_allocate(self, devices):
        return ContainerAllocation(envs={"TOY_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)})
