"""Attribute filters (`eq ne gt gte lt lte in nin`, compound `and`/`or`), checked and applied per file.

A filter selects files, not chunks, so it is applied to the (few) files' attributes before the
index is asked, and the index only ranks chunks of the files that pass.
"""

from __future__ import annotations

from typing import Any

from ..canonical.errors import APIError

COMPARISONS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"})
Scalar = (str, int, float, bool)


def check(value: Any, param: str = "filters") -> dict[str, Any]:
    """The filter as given, once it is well-formed; a 400 naming the bad part otherwise."""
    if not isinstance(value, dict):
        raise _invalid(param, "a filter must be an object")
    kind = value.get("type")
    if kind in ("and", "or"):
        filters = value.get("filters")
        if not isinstance(filters, list) or not filters:
            raise _invalid(f"{param}.filters", "a compound filter needs a non-empty `filters` list")
        for position, inner in enumerate(filters):
            check(inner, f"{param}.filters[{position}]")
        return value
    if kind not in COMPARISONS:
        raise _invalid(f"{param}.type", f"unknown filter type {kind!r}")
    if not isinstance(value.get("key"), str):
        raise _invalid(f"{param}.key", "a comparison filter needs a string `key`")
    target = value.get("value")
    if kind in ("in", "nin"):
        if not isinstance(target, list) or not all(isinstance(item, Scalar) for item in target):
            raise _invalid(f"{param}.value", f"`{kind}` needs a list of strings or numbers")
    elif not isinstance(target, Scalar):
        raise _invalid(f"{param}.value", "the value must be a string, a number or a boolean")
    return value


def matches(flt: dict[str, Any], attributes: dict[str, Any]) -> bool:
    kind = flt["type"]
    if kind == "and":
        return all(matches(inner, attributes) for inner in flt["filters"])
    if kind == "or":
        return any(matches(inner, attributes) for inner in flt["filters"])
    if flt["key"] not in attributes:
        return kind in ("ne", "nin")
    actual, target = attributes[flt["key"]], flt["value"]
    if kind in ("in", "nin"):
        return any(_equal(actual, item) for item in target) == (kind == "in")
    if kind in ("eq", "ne"):
        return _equal(actual, target) == (kind == "eq")
    if not _comparable(actual, target):
        return False
    if kind == "gt":
        return actual > target
    if kind == "gte":
        return actual >= target
    if kind == "lt":
        return actual < target
    return actual <= target


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(actual: Any, target: Any) -> bool:
    # True must not equal 1: booleans and numbers are different attribute types.
    if isinstance(actual, bool) or isinstance(target, bool):
        return isinstance(actual, bool) and isinstance(target, bool) and actual == target
    return bool(actual == target)


def _comparable(actual: Any, target: Any) -> bool:
    return (_number(actual) and _number(target)) or (isinstance(actual, str) and isinstance(target, str))


def _invalid(param: str, why: str) -> APIError:
    return APIError(400, f"Invalid filter: {why}.", param=param, code="invalid_value")
