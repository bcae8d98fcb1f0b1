"""The ``filter`` of ``BaseStore.search``, as LangGraph documents it (pure functions).

A filter is a mapping from top-level value keys to conditions; an item matches when every
condition holds:

* a plain value matches by equality; a mapping without ``$`` keys matches a nested mapping
  key by key (recursively); a list matches a list of the same length element by element;
* a mapping of operators applies each of them: ``$eq`` and ``$ne`` compare for (in)equality,
  ``$gt``, ``$gte``, ``$lt`` and ``$lte`` compare as numbers.

This is the behaviour of LangGraph's ``InMemoryStore`` (``tests/test_store.py`` runs both on
the same items), with two differences that follow PostgreSQL's ``jsonb`` rather than raising
``TypeError`` half-way through a search: a numeric comparison on an item whose value is
missing or not a number does not match, and a filter that is itself malformed (an unknown
operator, a non-numeric bound) raises :class:`~local_ai_memory.InvalidInputError` before any
item is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from local_ai_memory import InvalidInputError

__all__ = ["check_filter", "matches"]

_ORDER = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}
_OPERATORS = frozenset({"$eq", "$ne", *_ORDER})


def _is_operators(condition: object) -> bool:
    return isinstance(condition, Mapping) and any(str(key).startswith("$") for key in condition)


def _number(value: object) -> float | None:
    """``value`` as a number for ``$gt``-style comparisons (``float()`` rules), else ``None``."""
    if isinstance(value, (int, float, str)):
        try:
            number = float(value)
        except ValueError:
            return None
        return None if math.isnan(number) else number
    return None


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse a malformed filter with :class:`InvalidInputError` (before any item is read)."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidInputError(f"a store filter must be a mapping, got {type(filter).__name__}")
    for key, condition in filter.items():
        _check_condition(condition, f"filter[{key!r}]")


def _check_condition(condition: object, where: str) -> None:
    if _is_operators(condition):
        assert isinstance(condition, Mapping)
        for operator, bound in condition.items():
            if operator not in _OPERATORS:
                raise InvalidInputError(f"{where}: unknown operator {operator!r}; use one of {sorted(_OPERATORS)}")
            if operator in _ORDER and _number(bound) is None:
                raise InvalidInputError(f"{where}: {operator} needs a number, got {bound!r}")
    elif isinstance(condition, Mapping):
        for key, inner in condition.items():
            _check_condition(inner, f"{where}[{key!r}]")
    elif isinstance(condition, (list, tuple)):
        for index, inner in enumerate(condition):
            _check_condition(inner, f"{where}[{index}]")


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` satisfies ``filter`` (checked by :func:`check_filter`)."""
    return not filter or all(_holds(value.get(key), condition) for key, condition in filter.items())


def _holds(actual: object, condition: object) -> bool:
    if _is_operators(condition):
        assert isinstance(condition, Mapping)
        return all(_apply(actual, operator, bound) for operator, bound in condition.items())
    if isinstance(condition, Mapping):
        return isinstance(actual, Mapping) and all(_holds(actual.get(k), v) for k, v in condition.items())
    if isinstance(condition, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(condition)
            and all(_holds(a, c) for a, c in zip(actual, condition, strict=True))
        )
    return actual == condition


def _apply(actual: object, operator: str, bound: object) -> bool:
    if operator == "$eq":
        return actual == bound
    if operator == "$ne":
        return actual != bound
    left, right = _number(actual), _number(bound)
    return left is not None and right is not None and bool(_ORDER[operator](left, right))
