"""Device-plugin domain logic: building Allocate answers from a pod's allocation."""

from .allocate import container_allocations, finish_allocation

__all__ = ["container_allocations", "finish_allocation"]
