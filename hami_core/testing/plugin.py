"""pytest plugin of the conformance kit: fixtures and the ``hami_conformance`` marker."""

from __future__ import annotations

import pytest

from hami_core.plugin import BackendManager


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hami_conformance: a backend conformance kit test")


@pytest.fixture(scope="session")
def hami_installed_backends() -> BackendManager:
    """Every installed backend, loaded through the ``hami.backends`` entry points."""
    return BackendManager.from_entry_points(disabled=[])
