"""Admission logic of the mutating webhook (PROTOCOL.md §6), pure and testable without a server.

- ``admission``: ``Admission.review`` (a CREATE) and ``review_update``: parse every
  container once, run the backends' ``hami_mutate``, check quota and devices, set the
  scheduler name.
- ``trust``: what a pod's author may not write (scheduler-owned annotations, the shim's
  and every backend's Allocate variables, protected mounts).
- ``mutation``: a backend's ``MutateResult`` written into the pod as a JSON patch.
- ``misplaced``: device limits written where Kubernetes does not read them.

The HTTPS edge is ``hami_core.servers.webhook``.
"""

from .admission import Admission, AdmissionResult

__all__ = ["Admission", "AdmissionResult"]
