"""``MemoryManager``: the runtime memory of one scope (levels L0 to L3) over a storage backend.

The manager checks input and applies the rules of each level; where and how records are kept is
the :class:`~local_ai_memory._contracts.runtime.RuntimeBackend`'s business (plain files under
``{root}/memory/`` by default, see :mod:`local_ai_memory._backends.files.runtime`). Managers made by
:meth:`MemoryManager.scoped` share their backend.

* L0 state: a JSON object, updated as a JSON Merge Patch (RFC 7396) or replaced whole.
* L1 working memory: Markdown text, replaced whole or compare-and-swapped.
* L2 plans: any JSON value per plan id (checkpoints are plans, see ``_checkpoints``), plus an
  append-only step log per plan.
* L3 tool results: JSON payloads by id, owned by the scope that saved them. Another scope
  asking for the id gets the same :class:`RecordNotFoundError` as for an id that never existed.

Every method has an async twin (``a`` prefix) that calls the backend's async method, so a
natively async backend runs without threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from local_ai_memory._contracts.runtime import GLOBAL_STEM, RuntimeBackend, Scope, StateChange
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import InvalidInputError, RecordNotFoundError
from local_ai_memory._shared.naming import validate_id
from local_ai_memory._shared.records import (
    BOOKKEEPING_KEY,
    ToolIndexEntry,
    ToolResultPage,
    check_json_value,
    visible_state,
)
from local_ai_memory._shared.unicode import check_text

__all__ = ["GLOBAL_STEM", "MemoryManager", "merge_patch"]


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON Merge Patch ``patch`` applied (RFC 7396); pure, ``target`` is not changed.

    Objects merge key by key, ``None`` (JSON ``null``) removes a key, anything else replaces.

    >>> merge_patch({"a": 1, "b": {"x": 1, "y": 2}}, {"b": {"y": None, "z": 3}, "c": [1]})
    {'a': 1, 'b': {'x': 1, 'z': 3}, 'c': [1]}
    """
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _patched(patch: object) -> StateChange:
    """The change of a user's state patch: merged, with the library's bookkeeping out of its reach."""
    checked = _users(patch, "state patch")
    return lambda state: merge_patch(state, checked)


def _replaced(new: object) -> StateChange:
    """The change of a user's whole new state: the library's bookkeeping stays as it was."""
    checked = _users(new, "state")

    def change(state: dict[str, Any]) -> dict[str, Any]:
        books = {BOOKKEEPING_KEY: state[BOOKKEEPING_KEY]} if BOOKKEEPING_KEY in state else {}
        return {**checked, **books}

    return change


def _users(state: object, what: str) -> Mapping[str, Any]:
    checked = _checked_patch(state, what)
    if BOOKKEEPING_KEY in checked:
        raise InvalidInputError(
            f"{BOOKKEEPING_KEY!r} is the library's own entry of the state: a {what} cannot set it "
            "(the library reads it with bookkeeping())"
        )
    return checked


def _books_patched(patch: object) -> StateChange:
    """The change merging ``patch`` into the library's bookkeeping (a damaged value is replaced)."""
    checked = _checked_patch(patch, "bookkeeping patch")
    return lambda state: merge_patch(state, {BOOKKEEPING_KEY: checked})


def _books_of(state: Mapping[str, Any]) -> dict[str, Any]:
    found = state.get(BOOKKEEPING_KEY)
    return dict(found) if isinstance(found, dict) else {}


def _checked_text(text: object) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(f"working memory must be a string, got {type(text).__name__}")
    check_text(text, "working memory")
    return text


def _checked_patch(patch: object, what: str) -> Mapping[str, Any]:
    if not isinstance(patch, Mapping):
        raise InvalidInputError(f"{what} must be a mapping, got {type(patch).__name__}")
    check_json_value(patch, what)
    return patch


def _check_page_bounds(offset: object, limit: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a whole number >= 0, got {offset!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"limit must be a whole number >= 1, got {limit!r}")


class MemoryManager:
    """L0-L3 runtime memory of one ``(user_id, session_id)`` scope (or the unscoped memory).

    >>> from local_ai_memory.backends import InMemoryRuntimeBackend
    >>> manager = MemoryManager(InMemoryRuntimeBackend()).scoped("alice", "s1")
    >>> manager.update_state({"current_task": "refactor auth", "current_step": 1})
    {'current_task': 'refactor auth', 'current_step': 1}
    >>> manager.save_plan("auth", {"steps": ["read", "write"]})
    >>> manager.load_plan("auth")
    {'steps': ['read', 'write']}

    The manager is given its backend; :class:`~local_ai_memory.Memory` chooses it from a config.
    """

    def __init__(
        self,
        backend: RuntimeBackend,
        config: MemoryConfig | None = None,
        *,
        user_id: str | None = None,
        session_id: str | None = None,
    ) -> None:
        if not isinstance(backend, RuntimeBackend):
            raise InvalidInputError(
                f"MemoryManager needs a RuntimeBackend, got {type(backend).__name__}; "
                "use Memory.open(root).session(user_id, session_id) for the files under a folder"
            )
        self.config = config if config is not None else MemoryConfig()
        self.scope_info = Scope.of(user_id, session_id)
        self.user_id = user_id
        self.session_id = session_id
        self.backend: RuntimeBackend = backend

    @property
    def scope(self) -> str | None:
        """The storage key of the scope (``alice_s1``), or ``None`` for the unscoped memory."""
        return self.scope_info.key if self.scope_info.scoped else None

    @property
    def stem(self) -> str:
        """The storage key of this manager's records: the scope key, or ``global``."""
        return self.scope_info.key

    def __repr__(self) -> str:
        where = f"scope={self.scope!r}" if self.scope else "unscoped"
        return f"MemoryManager({self.backend!r}, {where})"

    def scoped(self, user_id: str, session_id: str) -> MemoryManager:
        """A manager bound to ``(user_id, session_id)``, sharing backend and config.

        Raises :class:`InvalidInputError` for a hostile or malformed id, before touching storage.
        """
        return MemoryManager(self.backend, self.config, user_id=user_id, session_id=session_id)

    def cleanup_temp_files(self) -> int:
        """Remove what writers that crashed left behind; return how many leftovers."""
        return self.backend.recover()

    # -- L0 state -----------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The L0 state of this scope (``{}`` when none is stored or the record was corrupt).

        The user's state only: the library's own entry (:meth:`bookkeeping`) is never in it.
        """
        return visible_state(self.backend.get_state(self.scope_info))

    def update_state(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Apply ``patch`` to the L0 state as a JSON Merge Patch (RFC 7396) and return the new state.

        Nested objects merge, ``None`` removes a key, any other value replaces: after
        ``{"task": "x", "opts": {"a": 1}}``, the patch ``{"opts": {"b": 2}, "task": None}`` leaves
        ``{"opts": {"a": 1, "b": 2}}``. Use :meth:`replace_state` to set the whole state. Atomic
        across threads, tasks and processes: concurrent updates are never lost. The library's
        own entry (:data:`BOOKKEEPING_KEY`) is refused in ``patch`` and kept as it is.
        """
        return visible_state(self.backend.update_state(self.scope_info, _patched(patch)))

    def replace_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the whole L0 state with ``state`` (no merging); return it. The library's own
        entry is kept as it is."""
        return visible_state(self.backend.update_state(self.scope_info, _replaced(state)))

    async def aget_state(self) -> dict[str, Any]:
        """Async twin of :meth:`get_state`."""
        return visible_state(await self.backend.aget_state(self.scope_info))

    async def aupdate_state(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`update_state`."""
        return visible_state(await self.backend.aupdate_state(self.scope_info, _patched(patch)))

    async def areplace_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`replace_state`."""
        return visible_state(await self.backend.aupdate_state(self.scope_info, _replaced(state)))

    def bookkeeping(self) -> dict[str, Any]:
        """The library's own L0 entries, kept beside the user's state but never in it (e.g. the
        status of an agent run, the plan it uses, what L1 already merged)."""
        return _books_of(self.backend.get_state(self.scope_info))

    async def abookkeeping(self) -> dict[str, Any]:
        """Async twin of :meth:`bookkeeping`."""
        return _books_of(await self.backend.aget_state(self.scope_info))

    def update_bookkeeping(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge ``patch`` into the library's own L0 entries, atomically with the state's writers.

        For integrations recording what is not the agent's state (which plan a run uses, where
        it resumed): prompts and :meth:`get_state` never show it. ``None`` removes an entry.
        Returns the new bookkeeping.
        """
        return _books_of(self.backend.update_state(self.scope_info, _books_patched(patch)))

    async def aupdate_bookkeeping(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`update_bookkeeping`."""
        return _books_of(await self.backend.aupdate_state(self.scope_info, _books_patched(patch)))

    # -- L1 working memory --------------------------------------------------------------

    def get_working_memory(self) -> str:
        """The L1 working-memory Markdown of this scope (``""`` when none)."""
        return self.backend.get_working_memory(self.scope_info)

    def update_working_memory(self, text: str) -> None:
        """Replace the L1 working memory with ``text`` (atomically)."""
        self.swap_working_memory(None, text)

    def swap_working_memory(self, expected: str | None, text: str) -> str | None:
        """Write ``text`` if L1 still equals ``expected`` (``None``: unconditionally).

        Returns ``None`` when written, else the L1 text found, so a caller that read L1, worked
        on it for a while (an LLM call) and lost a race can merge instead of overwriting.
        """
        return self.backend.swap_working_memory(self.scope_info, expected, _checked_text(text))

    async def aget_working_memory(self) -> str:
        """Async twin of :meth:`get_working_memory`."""
        return await self.backend.aget_working_memory(self.scope_info)

    async def aupdate_working_memory(self, text: str) -> None:
        """Async twin of :meth:`update_working_memory`."""
        await self.aswap_working_memory(None, text)

    async def aswap_working_memory(self, expected: str | None, text: str) -> str | None:
        """Async twin of :meth:`swap_working_memory`."""
        return await self.backend.aswap_working_memory(self.scope_info, expected, _checked_text(text))

    # -- L2 plans -----------------------------------------------------------------------

    def save_plan(self, plan_id: str, payload: Any) -> None:
        """Store ``payload`` (any JSON value) as plan ``plan_id`` of this scope, replacing it."""
        self.backend.update_plans(self.scope_info, _put_plan(plan_id, payload))

    def load_plan(self, plan_id: str) -> Any:
        """The payload of plan ``plan_id``; :class:`RecordNotFoundError` if this scope has none."""
        validate_id(plan_id, "plan id")
        return self._found_plan(self.list_plans(), plan_id)

    def list_plans(self) -> dict[str, Any]:
        """Every plan of this scope: ``{plan_id: payload}``."""
        return self.backend.get_plans(self.scope_info)

    def delete_plan(self, plan_id: str) -> bool:
        """Remove plan ``plan_id`` and its step log; return whether it existed."""
        validate_id(plan_id, "plan id")
        existed: list[bool] = []
        self.backend.update_plans(self.scope_info, _drop_plan(plan_id, existed))
        return bool(existed)

    async def asave_plan(self, plan_id: str, payload: Any) -> None:
        """Async twin of :meth:`save_plan`."""
        await self.backend.aupdate_plans(self.scope_info, _put_plan(plan_id, payload))

    async def aload_plan(self, plan_id: str) -> Any:
        """Async twin of :meth:`load_plan`."""
        validate_id(plan_id, "plan id")
        return self._found_plan(await self.alist_plans(), plan_id)

    async def alist_plans(self) -> dict[str, Any]:
        """Async twin of :meth:`list_plans`."""
        return await self.backend.aget_plans(self.scope_info)

    async def adelete_plan(self, plan_id: str) -> bool:
        """Async twin of :meth:`delete_plan`."""
        validate_id(plan_id, "plan id")
        existed: list[bool] = []
        await self.backend.aupdate_plans(self.scope_info, _drop_plan(plan_id, existed))
        return bool(existed)

    def append_plan_steps(self, plan_id: str, steps: Sequence[dict[str, Any]]) -> None:
        """Append ``steps`` (JSON objects) to plan ``plan_id``'s step log (cost independent of its length)."""
        validate_id(plan_id, "plan id")
        check_json_value(list(steps), "plan steps")
        self.backend.append_plan_steps(self.scope_info, plan_id, list(steps))

    def plan_steps(self, plan_id: str) -> list[dict[str, Any]]:
        """Plan ``plan_id``'s step log, oldest first."""
        return self.backend.get_plan_steps(self.scope_info, validate_id(plan_id, "plan id"))

    def clear_plan_steps(self, plan_id: str) -> None:
        """Empty plan ``plan_id``'s step log."""
        self.backend.clear_plan_steps(self.scope_info, validate_id(plan_id, "plan id"))

    def _found_plan(self, plans: dict[str, Any], plan_id: str) -> Any:
        if plan_id not in plans:
            raise RecordNotFoundError(f"no plan {plan_id!r} in {self.scope_info.describe()}")
        return plans[plan_id]

    # -- L3 tool results ----------------------------------------------------------------

    def save_tool_result(self, result_id: str, payload: Any) -> int:
        """Store ``payload`` (any JSON value) as this scope's tool result ``result_id``; return bytes stored."""
        validate_id(result_id, "tool result id")
        check_json_value(payload, "tool result payload")
        return self.backend.save_tool_result(self.scope_info, result_id, payload)

    def load_tool_result(self, result_id: str) -> Any:
        """The payload of this scope's tool result ``result_id``.

        :class:`RecordNotFoundError` if it is missing, pruned, or belongs to another scope.
        """
        return self.backend.load_tool_result(self.scope_info, validate_id(result_id, "tool result id"))

    def load_tool_result_page(self, result_id: str, offset: int, limit: int) -> ToolResultPage:
        """Characters ``offset`` to ``offset + limit`` of this scope's stored output (scope-checked)."""
        validate_id(result_id, "tool result id")
        _check_page_bounds(offset, limit)
        page = self.backend.read_tool_result_page(self.scope_info, result_id, offset, limit)
        return page.model_copy(update={"limit": limit})  # what render_page numbers the pages by

    def tool_result_exists(self, result_id: str) -> bool:
        """Whether any scope holds ``result_id`` (to keep new ids unique)."""
        return self.backend.tool_result_exists(validate_id(result_id, "tool result id"))

    def list_tool_results(self) -> dict[str, ToolIndexEntry]:
        """The tool results this scope owns: ``{result_id: ToolIndexEntry(size, saved_at)}``."""
        return self.backend.list_tool_results(self.scope_info)

    def count_tool_results(self) -> int:
        """How many results this scope owns."""
        return self.backend.count_tool_results(self.scope_info)

    def delete_tool_results(self, result_ids: Sequence[str]) -> list[str]:
        """Delete those of ``result_ids`` this scope owns; return those deleted."""
        for result_id in result_ids:
            validate_id(result_id, "tool result id")
        return self.backend.delete_tool_results(self.scope_info, list(result_ids))

    @contextlib.contextmanager
    def tool_index_locked(self) -> Iterator[None]:
        """Hold the scope's maintenance lock (retention and checkpoint references wait)."""
        with self.backend.locked(self.scope_info):
            yield

    async def asave_tool_result(self, result_id: str, payload: Any) -> int:
        """Async twin of :meth:`save_tool_result`."""
        validate_id(result_id, "tool result id")
        check_json_value(payload, "tool result payload")
        return await self.backend.asave_tool_result(self.scope_info, result_id, payload)

    async def aload_tool_result(self, result_id: str) -> Any:
        """Async twin of :meth:`load_tool_result`."""
        return await self.backend.aload_tool_result(self.scope_info, validate_id(result_id, "tool result id"))

    async def alist_tool_results(self) -> dict[str, ToolIndexEntry]:
        """Async twin of :meth:`list_tool_results`."""
        return await self.backend.alist_tool_results(self.scope_info)

    async def acount_tool_results(self) -> int:
        """Async twin of :meth:`count_tool_results`."""
        return await self.backend.acount_tool_results(self.scope_info)

    async def aload_tool_result_page(self, result_id: str, offset: int, limit: int) -> ToolResultPage:
        """Async twin of :meth:`load_tool_result_page`."""
        validate_id(result_id, "tool result id")
        _check_page_bounds(offset, limit)
        page = await self.backend.aread_tool_result_page(self.scope_info, result_id, offset, limit)
        return page.model_copy(update={"limit": limit})


def _put_plan(plan_id: str, payload: Any) -> Any:
    validate_id(plan_id, "plan id")
    check_json_value(payload, "plan payload")

    def change(plans: dict[str, Any]) -> dict[str, Any]:
        plans[plan_id] = payload
        return plans

    return change


def _drop_plan(plan_id: str, existed: list[bool]) -> Any:
    def change(plans: dict[str, Any]) -> dict[str, Any] | None:
        if plan_id not in plans:
            return None
        del plans[plan_id]
        existed.append(True)
        return plans

    return change
