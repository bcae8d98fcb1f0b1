"""The file backend the read-only commands use (imported only by a command that runs)."""

from __future__ import annotations

from local_ai_memory._contracts.knowledge import NoteInfo
from local_ai_memory.backends import FileKnowledgeBackend

__all__ = ["ReadOnlyFiles"]


class ReadOnlyFiles(FileKnowledgeBackend):
    """The file backend for commands that only read: a missing category folder is empty, not created."""

    def list_notes(self, category: str, user_prefix: str | None = None) -> dict[str, NoteInfo]:
        if not (self.data_dir / category).is_dir():
            return {}
        return super().list_notes(category, user_prefix)
