"""Transition alias: the shared fit moved to ``hami_core.backend.fit``; import it from
``hami_core.backend``. This module goes once every backend imports the kit."""

from hami_core.backend.fit import *  # noqa: F403
from hami_core.backend.fit import (  # noqa: F401
    GENERIC,
    DeviceFilters,
    fit_devices,
    load,
    node_score,
    rank,
    rank_groups,
    type_matches,
)
from hami_core.model import FitRules  # noqa: F401
