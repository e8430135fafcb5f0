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
"""

from .conformance import BackendConformance
from .sections import section

__all__ = ["BackendConformance", "section"]
