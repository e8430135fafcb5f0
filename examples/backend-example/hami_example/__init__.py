"""hami-example: a minimal backend for an invented vendor, ``EXAMPLE``.

It shows the shape of a real backend (see ``docs/writing-a-backend.md``): resource
names and annotation keys in ``names``, request parsing and admission in ``requests``,
and thin hook implementations in ``plugin``; placement is the core's shared device-fit
logic (``hami_core.backend.fit``). It passes the conformance kit
(``tests/conformance/test_example_backend.py``).
"""

BACKEND_NAME = "example"
VENDOR = "EXAMPLE"

__all__ = ["BACKEND_NAME", "VENDOR"]
