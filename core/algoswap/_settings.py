"""The environment variables of the plugin system; discovery reads them (first use of the registry,
or ``algoswap.reload_plugins()``)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping

from ._errors import PluginError

ENV_ALLOW = "ALGOSWAP_PLUGINS"
ENV_DENY = "ALGOSWAP_DISABLE_PLUGINS"
ENV_STRICT = "ALGOSWAP_STRICT_PLUGINS"
ENV_TIMEOUT = "ALGOSWAP_PLUGIN_TIMEOUT"
ENV_STATE = "ALGOSWAP_STATE_DIR"
ENV_RETRY = "ALGOSWAP_RETRY_PLUGINS"
ENV_CACHE = "ALGOSWAP_CACHE_DIR"
DEFAULT_TIMEOUT = 20.0


def normalise(name: str) -> str:
    """Plugin and distribution names compare as PEP 503 says: case and runs of -_. do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def env_names(env: Mapping[str, str], variable: str) -> set[str] | None:
    """The comma-separated names of ``variable``, normalised; None if it is unset or empty."""
    value = env.get(variable, "").strip()
    if not value:
        return None
    return {normalise(part.strip()) for part in value.split(",") if part.strip()}


def timeout_from(env: Mapping[str, str]) -> float | None:
    """Seconds allowed to a plugin's import, registration, probe or predicate call; None: no limit."""
    text = env.get(ENV_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if seconds < 0 or math.isnan(seconds):
        raise PluginError(f"{ENV_TIMEOUT} must be a number of seconds (0: no limit); got {text!r}")
    return None if seconds == 0 or math.isinf(seconds) else seconds


def state_directory(env: Mapping[str, str]) -> Path | None:
    """``ALGOSWAP_STATE_DIR``, else ``$XDG_STATE_HOME/algoswap``, else ``~/.local/state/algoswap``."""
    return _user_directory(env, ENV_STATE, "XDG_STATE_HOME", (".local", "state"))


def cache_directory(env: Mapping[str, str]) -> Path | None:
    """``ALGOSWAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/algoswap``, else ``~/.cache/algoswap``."""
    return _user_directory(env, ENV_CACHE, "XDG_CACHE_HOME", (".cache",))


def _user_directory(env: Mapping[str, str], variable: str, xdg: str, under_home: tuple[str, ...]) -> Path | None:
    explicit = env.get(variable, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = env.get(xdg, "").strip()
    try:
        return (Path(base) if base else Path.home().joinpath(*under_home)) / "algoswap"
    except RuntimeError:  # no home directory to be found
        return None
