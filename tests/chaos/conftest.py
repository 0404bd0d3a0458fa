"""The chaos tier runs only when asked for (`make chaos`, or `pytest tests/chaos -m chaos`).

It starts its own 3-broker stack and takes about 7 minutes, so a plain `pytest`
(`make test`) deselects it.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the chaos tests unless the marker expression names ``chaos``."""
    if "chaos" in (config.option.markexpr or ""):
        return
    chaos = [i for i in items if i.get_closest_marker("chaos") is not None]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [i for i in items if i.get_closest_marker("chaos") is None]
