"""Namespaces of the LangGraph store: which user and category each one is (pure functions).

``("bob",)`` is user ``bob``'s notes in the default (first configured) category and
``("bob", "work")`` his notes in category ``work``, which must be one of
``MemoryConfig.categories``. ``("bob", <default category>)`` is refused when writing, so one
note never shows under two namespaces. Longer namespaces have no place in the knowledge
memory and are refused too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langgraph.store.base import GetOp, InvalidNamespaceError, MatchCondition, Op, PutOp, SearchOp

from local_ai_memory import InvalidInputError
from local_ai_memory.integration import validate_name

__all__ = [
    "Place",
    "check_labels",
    "matches_conditions",
    "namespace_of",
    "place_of",
    "places_under",
    "select_namespaces",
]


@dataclass(frozen=True)
class Place:
    """Where a namespace's items are kept: a user's notes in some categories (one when written)."""

    user_id: str
    categories: tuple[str, ...]


def check_labels(op: Op) -> None:
    """LangGraph's label rules for an operation given to ``batch`` directly (its ``put``, ``get``
    and ``search`` check them already): non-empty strings without ``.`` or NUL."""
    if isinstance(op, (GetOp, PutOp)):
        paths = [op.namespace]
    elif isinstance(op, SearchOp):
        paths = [op.namespace_prefix]
    else:  # a ListNamespacesOp (anything else is refused by the store afterwards)
        paths = [condition.path for condition in getattr(op, "match_conditions", None) or ()]
    for path in paths:
        for label in path:
            if not isinstance(label, str) or not label or "." in label or "\x00" in label:
                raise InvalidNamespaceError(f"invalid namespace label {label!r} in {path!r}")


def namespace_of(user_id: str, category: str, categories: Sequence[str]) -> tuple[str, ...]:
    """The namespace of ``user_id``'s notes in ``category`` (the default category has no label)."""
    return (user_id,) if category == categories[0] else (user_id, category)


def place_of(namespace: tuple[str, ...], categories: Sequence[str]) -> Place:
    """The user and category of one namespace, or :class:`InvalidInputError` saying why it has none."""
    if len(namespace) not in (1, 2):
        raise InvalidInputError(
            f"namespace {namespace!r} has {len(namespace)} labels: this store keeps (user,) "
            "for the default category and (user, category) for another configured category"
        )
    user_id = validate_name(namespace[0], "user_id (the namespace's first label)")
    if len(namespace) == 1:
        return Place(user_id, (categories[0],))
    category = namespace[1]
    if category == categories[0]:
        raise InvalidInputError(
            f"namespace {namespace!r}: {category!r} is the default category, whose namespace is ({user_id!r},)"
        )
    if category not in categories:
        raise InvalidInputError(
            f"namespace {namespace!r}: category {category!r} is not configured; add it to "
            f"MemoryConfig(categories=...) (configured: {list(categories)})"
        )
    return Place(user_id, (category,))


def places_under(prefix: tuple[str, ...], users: Iterable[str], categories: Sequence[str]) -> list[Place]:
    """The places of every namespace starting with ``prefix`` (``users``: those who have notes,
    used only when the prefix names no user). A prefix that no namespace can have gives ``[]``."""
    if not prefix:
        return [Place(user_id, tuple(categories)) for user_id in users]
    if len(prefix) == 1:
        try:
            return [Place(validate_name(prefix[0], "user_id"), tuple(categories))]
        except InvalidInputError:
            return []
    try:
        return [place_of(prefix, categories)]
    except InvalidInputError:
        return []


def matches_conditions(namespace: tuple[str, ...], conditions: Iterable[MatchCondition]) -> bool:
    """Whether ``namespace`` meets every prefix/suffix condition (``"*"`` matches any one label)."""
    for condition in conditions:
        path = tuple(condition.path)
        if len(namespace) < len(path):
            return False
        if condition.match_type == "prefix":
            labels = namespace[: len(path)]
        elif condition.match_type == "suffix":
            labels = namespace[len(namespace) - len(path) :]
        else:
            raise InvalidInputError(f"unknown namespace match type {condition.match_type!r}")
        if any(want not in ("*", label) for label, want in zip(labels, path, strict=True)):
            return False
    return True


def select_namespaces(
    namespaces: Iterable[tuple[str, ...]],
    conditions: Iterable[MatchCondition] | None,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """``list_namespaces``: those meeting ``conditions``, cut to ``max_depth`` labels, sorted, paged."""
    chosen = [ns for ns in namespaces if matches_conditions(ns, conditions or ())]
    if max_depth is not None:
        chosen = [ns[:max_depth] for ns in chosen]
    return sorted(set(chosen))[offset : offset + limit]
