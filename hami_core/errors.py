"""The one small exception hierarchy of hami.

"Does not fit" is never an exception (it is a ``FitResult`` with reasons). Exceptions
are for bad input, broken contracts and failed operations; each carries the HTTP status
and gRPC status code that an edge (extender, webhook, device plugin) answers with, so
each edge catches ``HamiError`` once and maps it without a table of its own.
"""

from __future__ import annotations


class HamiError(Exception):
    """Base of every error hami raises on purpose.

    Attributes:
        http_status: status an HTTP edge answers with (the extender answers 200 with the
            message in ``Error``, as kube-scheduler expects; the webhook denies).
        grpc_code: name of the ``grpc.StatusCode`` a gRPC edge answers with.
    """

    http_status: int = 500
    grpc_code: str = "INTERNAL"


class InvalidInputError(HamiError, ValueError):
    """Input from outside (a pod, an annotation, a file, a request) is malformed."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class QuantityError(InvalidInputError):
    """A Kubernetes quantity is malformed or out of range for its resource."""


class AnnotationError(InvalidInputError):
    """An annotation value does not follow PROTOCOL.md."""


class ConfigError(InvalidInputError):
    """The configuration file has an unknown key or a bad value; the message names it."""


class BackendError(HamiError):
    """A backend could not be loaded or broke the hook contract; names the backend."""

    def __init__(self, backend: str, message: str) -> None:
        super().__init__(f"backend {backend!r}: {message}")
        self.backend = backend


class ConflictError(HamiError):
    """A write lost an optimistic-concurrency race or a lock is held by someone else.

    Temporary: the caller may retry.
    """

    http_status = 409
    grpc_code = "ABORTED"


class NotFoundError(HamiError, LookupError):
    """A named object (pod, node, device) does not exist."""

    http_status = 404
    grpc_code = "NOT_FOUND"
