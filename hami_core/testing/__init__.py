"""The backend conformance kit: what a vendor backend runs to prove itself correct.

Opt in from a ``conftest.py``::

    pytest_plugins = ["hami_core.testing.plugin"]

then subclass ``BackendConformance`` in a test module::

    from hami_core.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "myvendor"      # the entry-point name in ``hami.backends``

Every test of the base class then runs against the backend. Override ``plugin`` to
test a plugin object that is not installed, ``sample_devices`` /
``sample_container`` when the vendor's shapes differ from the defaults, and
``expected_count`` when the vendor rounds device counts (a request of 1 parses as 2).

The kit runs under pytest, which ``pip install 'hami-core[testing]'`` brings.
"""

from hami_core.extras import require_extra

require_extra("testing", "hami_core.testing (the backend conformance kit)")

from .conformance import BackendConformance  # noqa: E402
from .sections import mutated, section  # noqa: E402

__all__ = ["BackendConformance", "mutated", "section"]
