"""How a test loads the `ujobs` pytest plugin into a pytest run of its own."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Final

#: The module the `pytest11` entry point `ujobs` names.
PLUGIN: Final = "jobs_core.testing.pytest_plugin"


def installed_plugin() -> bool:
    """Whether the installed metadata registers our plugin (an install that knows the entry
    point; a checkout installed before it was declared does not)."""
    return any(ep.name == "ujobs" and ep.value == PLUGIN for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    """What loads the plugin in a pytest run: nothing once installed (a second load would be
    refused as a duplicate), `-p` while the installed metadata does not know the entry point."""
    return [] if installed_plugin() else ["-p", PLUGIN]
