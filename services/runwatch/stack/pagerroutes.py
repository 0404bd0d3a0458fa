"""The pager's default routing rules for a stack on other ports than the default's."""

from __future__ import annotations

from pathlib import Path

from runwatch.resources import pager_routes_file
from runwatch.stack.settings import StackSettings

#: The Alertmanager the packaged routing rules (``infra/pager/routes.yaml``) page.
DEFAULT_AM_URL = "http://127.0.0.1:9093"


def stack_routes_file(settings: StackSettings) -> Path:
    """Return the pager's default rules for this stack (see :func:`write_stack_routes`).

    The packaged rules page the default stack's Alertmanager; a stack on other
    ports gets a copy under its state directory that pages its own.
    """
    if settings.alertmanager_url == DEFAULT_AM_URL:
        return pager_routes_file()
    return settings.state / "pager" / "routes.yaml"


def write_stack_routes(settings: StackSettings) -> None:
    """Write the copy of the packaged rules that pages this stack's Alertmanager (if needed)."""
    path = stack_routes_file(settings)
    if path == pager_routes_file():
        return
    text = pager_routes_file().read_text(encoding="utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(f"url: {DEFAULT_AM_URL}", f"url: {settings.alertmanager_url}"),
                    encoding="utf-8")
