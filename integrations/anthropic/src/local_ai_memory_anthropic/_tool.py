"""Claude's client-side ``memory`` tool, kept in a user's notes: sync and async backends.

:class:`LocalMemoryTool` subclasses the SDK's ``BetaAbstractMemoryTool`` and
:class:`AsyncLocalMemoryTool` its ``BetaAsyncAbstractMemoryTool``. Each command is written once,
as a sans-IO flow that yields the knowledge calls it needs (:class:`_Call`); the sync tool
answers them with ``memory.knowledge.<method>``, the async one with its ``a``-twin. The
editing rules are the library's: ``str_replace`` is ``Knowledge.edit_note`` (exact, unique),
``insert`` is ``Knowledge.insert_into_note``, ``create`` is a write that must not find the note,
``rename`` is ``Knowledge.rename_note``. Every write goes through the knowledge store, which
indexes it at once: ``memory.knowledge.search`` finds a note the moment the tool wrote it.

Errors reach the model the SDK's way, as ``ToolError`` (the tool runner turns it into a tool
result with ``is_error: true``), worded so the model can correct its call. The path layout
and the texts are in :mod:`._paths`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from local_ai_memory import ConflictError, LocalMemoryError, Memory, RecordNotFoundError, note_hash
from local_ai_memory.integration import adrive, caller_message, drive, validate_name

from ._paths import (
    ROOT,
    Target,
    display_path,
    edit_snippet,
    file_tail,
    file_view,
    listing_view,
    parse_path,
)

__all__ = ["AsyncLocalMemoryTool", "LocalMemoryTool"]


@dataclass(frozen=True)
class _Call:
    """One call a command needs of ``memory.knowledge``: ``method(user_id, *args, **kwargs)``."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Flow = Generator[_Call, Any, str]


class _Commands:
    """The six commands as flows, for one user of one memory (shared by both tools)."""

    def __init__(self, memory: Memory, user_id: str) -> None:
        self.memory = memory
        self.user_id = validate_name(user_id, "user_id")
        self.categories: tuple[str, ...] = tuple(memory.config.categories)

    def target(self, path: object) -> Target:
        return parse_path(path, self.categories)

    def _file(self, path: str) -> tuple[str, str]:
        """``(category, name)`` of a file path; :class:`ToolError` for a directory."""
        target = self.target(path)
        if target.category is None or target.name is None:
            raise ToolError(f"{path} is a directory, not a file")
        return target.category, target.name

    def _listing(self, categories: tuple[str, ...]) -> Generator[_Call, Any, list[tuple[str, int | None]]]:
        """Entries of the given categories; listing several (the root), each category but the
        default one (whose files are the top level) is a directory entry before its files.

        A category or note that cannot be read (a folder linked out of the data folder, say) is
        listed with no size and the rest is listed as usual: one bad entry never hides the others.
        """
        entries: list[tuple[str, int | None]] = []
        for category in categories:
            shown = display_path(category, None, self.categories) + "/"
            try:
                notes = yield _Call("notes", kwargs={"category": category})
            except LocalMemoryError as error:
                if len(categories) == 1:  # the directory asked for: say why it cannot be listed
                    raise
                caller_message(error, self.user_id, self.memory.config.runtime_data_dir)  # logged
                entries.append((shown, None))
                continue
            if len(categories) > 1 and category != self.categories[0]:
                entries.append((shown, 0))
            for note in notes:
                size: int | None = None
                try:
                    info = yield _Call("note_info", (note.name,), {"category": category})
                    size = info.size if info is not None else 0
                except LocalMemoryError as error:
                    caller_message(error, self.user_id, self.memory.config.runtime_data_dir)
                entries.append((display_path(category, note.name, self.categories), size))
        return entries

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> Flow:
        target = self.target(command.path)
        view_range = command.view_range
        if target.category is None:
            entries = yield from self._listing(self.categories)
            return listing_view(ROOT, entries, view_range)
        if target.name is None:
            entries = yield from self._listing((target.category,))
            shown = display_path(target.category, None, self.categories)
            return listing_view(shown, entries, view_range)
        try:
            text = yield _Call("read_note", (target.name,), {"category": target.category})
        except RecordNotFoundError:
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.") from None
        return file_view(command.path, text, view_range)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> Flow:
        category, name = self._file(command.path)
        try:
            yield _Call("write_note", (name, command.file_text), {"category": category, "expected_hash": ""})
        except ConflictError:
            raise ToolError(
                f"File {command.path} already exists: use str_replace or insert to change it, or delete it first"
            ) from None
        return f"File created successfully at: {display_path(category, name, self.categories)}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> Flow:
        category, name = self._file(command.path)
        before = yield from self._read(command.path, category, name)
        yield _Call(
            "edit_note",
            (name, command.old_str, command.new_str),
            {"category": category, "expected_hash": note_hash(before)},
        )
        after = yield _Call("read_note", (name,), {"category": category})
        return f"The memory file has been edited. The changed part (with line numbers):\n{edit_snippet(before, after)}"

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> Flow:
        category, name = self._file(command.path)
        yield from self._read(command.path, category, name)
        yield _Call("insert_into_note", (name, command.insert_line, command.insert_text), {"category": category})
        return f"The file {command.path} has been edited: text inserted after line {command.insert_line}."

    def _read(self, path: str, category: str, name: str) -> Generator[_Call, Any, str]:
        try:
            text: str = yield _Call("read_note", (name,), {"category": category})
        except RecordNotFoundError:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.") from None
        return text

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> Flow:
        target = self.target(command.path)
        if target.category is None:
            raise ToolError(f"Cannot delete the {ROOT} directory itself")
        if target.name is None:  # a category: every note of this user in it (the category stays)
            notes = yield _Call("notes", kwargs={"category": target.category})
            for note in notes:
                yield _Call("delete_note", (note.name,), {"category": target.category})
            return f"Successfully deleted {command.path} ({len(notes)} files)"
        existed = yield _Call("delete_note", (target.name,), {"category": target.category})
        if not existed:
            raise ToolError(f"The path {command.path} does not exist")
        return f"Successfully deleted {command.path}"

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> Flow:
        old = self.target(command.old_path)
        new = self.target(command.new_path)
        if old.name is None or old.category is None:
            raise ToolError(f"Cannot rename the directory {command.old_path}: directories are the memory's categories")
        if new.name is None or new.category is None:
            raise ToolError(
                f"The destination {command.new_path} is a directory: give the full new path, "
                f"such as {command.new_path.rstrip('/')}/{file_tail(old.name)}"
            )
        try:
            yield _Call("rename_note", (old.name, new.name), {"category": old.category, "new_category": new.category})
        except RecordNotFoundError:
            raise ToolError(f"The path {command.old_path} does not exist") from None
        except ConflictError:
            raise ToolError(f"The destination {command.new_path} already exists") from None
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    def clear(self) -> Flow:
        """Delete every note of the user in every category (what the SDK's reset hook asks)."""
        count = 0
        for category in self.categories:
            notes = yield _Call("notes", kwargs={"category": category})
            for note in notes:
                count += bool((yield _Call("delete_note", (note.name,), {"category": category})))
        return f"All memory cleared ({count} files)"


def _error(error: Exception, commands: _Commands) -> ToolError:
    """An error as the tool's answer, worded by the core's :func:`caller_message`: what was wrong
    in the model's own paths, never a host path or another user's file name (those go to the log)."""
    return ToolError(f"Error: {caller_message(error, commands.user_id, commands.memory.config.runtime_data_dir)}")


class LocalMemoryTool(BetaAbstractMemoryTool):
    """Claude's ``memory`` tool on ``user_id``'s notes in ``memory`` (blocking).

    >>> from local_ai_memory import Memory
    >>> tool = LocalMemoryTool(Memory.in_memory(), "alice")
    >>> tool.to_dict()
    {'type': 'memory_20250818', 'name': 'memory'}

    Give it to ``client.beta.messages.tool_runner(..., tools=[tool])``. The user is bound
    here, never named by the model; another user's notes are out of its reach.
    """

    def __init__(
        self, memory: Memory, user_id: str, *, cache_control: BetaCacheControlEphemeralParam | None = None
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.memory = memory
        self.user_id = user_id
        self._commands = _Commands(memory, user_id)

    def __repr__(self) -> str:
        return f"LocalMemoryTool(user_id={self.user_id!r})"

    def _run(self, flow: Flow) -> str:
        knowledge = self.memory.knowledge

        def answer(call: _Call) -> Any:
            return getattr(knowledge, call.method)(self.user_id, *call.args, **call.kwargs)

        try:
            return drive(flow, answer)
        except ToolError:
            raise
        except Exception as error:
            raise _error(error, self._commands) from error

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        """List ``/memories`` or a category, or show a note with line numbers, paged."""
        return self._run(self._commands.view(command))

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        """Create a note (refused if it exists); indexed at once."""
        return self._run(self._commands.create(command))

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        """Replace the one occurrence of ``old_str`` in a note."""
        return self._run(self._commands.str_replace(command))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        """Insert text after line ``insert_line`` (0: at the top) of a note."""
        return self._run(self._commands.insert(command))

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        """Delete a note, or every note of the user in a category."""
        return self._run(self._commands.delete(command))

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        """Rename or move a note (the destination must not exist)."""
        return self._run(self._commands.rename(command))

    def clear_all_memory(self) -> str:
        """Delete every note of the user in every category (what the SDK's reset hook asks)."""
        return self._run(self._commands.clear())


class AsyncLocalMemoryTool(BetaAsyncAbstractMemoryTool):
    """Async twin of :class:`LocalMemoryTool` (for ``AsyncAnthropic`` and its tool runner)."""

    def __init__(
        self, memory: Memory, user_id: str, *, cache_control: BetaCacheControlEphemeralParam | None = None
    ) -> None:
        super().__init__(cache_control=cache_control)
        self.memory = memory
        self.user_id = user_id
        self._commands = _Commands(memory, user_id)

    def __repr__(self) -> str:
        return f"AsyncLocalMemoryTool(user_id={self.user_id!r})"

    async def _run(self, flow: Flow) -> str:
        knowledge = self.memory.knowledge

        async def answer(call: _Call) -> Any:
            return await getattr(knowledge, "a" + call.method)(self.user_id, *call.args, **call.kwargs)

        try:
            return await adrive(flow, answer)
        except ToolError:
            raise
        except Exception as error:
            raise _error(error, self._commands) from error

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.view`."""
        return await self._run(self._commands.view(command))

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.create`."""
        return await self._run(self._commands.create(command))

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.str_replace`."""
        return await self._run(self._commands.str_replace(command))

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.insert`."""
        return await self._run(self._commands.insert(command))

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.delete`."""
        return await self._run(self._commands.delete(command))

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        """Async twin of :meth:`LocalMemoryTool.rename`."""
        return await self._run(self._commands.rename(command))

    async def clear_all_memory(self) -> str:
        """Async twin of :meth:`LocalMemoryTool.clear_all_memory`."""
        return await self._run(self._commands.clear())
