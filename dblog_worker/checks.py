"""One checked value from a section of the configuration file (ConfigError otherwise)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dblog_worker.errors import ConfigError


def str_value(section: Mapping[str, Any], dotted: str) -> str:
    value = section.get(dotted.split(".")[-1])
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{dotted} must be a non-empty string")
    return value


def number(section: Mapping[str, Any], key: str, default: float, low: float,
           high: float) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{key} must be a number from {low} to {high}, got {value!r}")
    return float(value)


def integer(section: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{key} must be an integer from {low} to {high}, got {value!r}")
    return value

