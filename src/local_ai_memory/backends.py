"""The storage contract and the backends that ship with the package.

A backend keeps what the engines store; :class:`RuntimeBackend` is the contract of the runtime
levels (L0-L3 and the session log), :class:`KnowledgeBackend` the one of the knowledge notes
(notes, a change feed, derived data). Pass them to :class:`~local_ai_memory.Memory`
(``runtime=``, ``knowledge=``) or use :meth:`Memory.in_memory`. :mod:`local_ai_memory.testing`
holds the conformance suites every backend must pass; ``docs/architecture.md`` explains how to
write one.
"""

from ._backends.file_knowledge import FileKnowledgeBackend
from ._backends.files import FileRuntimeBackend
from ._backends.knowledge import KnowledgeBackend, NoteChanges, NoteInfo, VectorCache
from ._backends.memory import InMemoryRuntimeBackend
from ._backends.memory_knowledge import InMemoryKnowledgeBackend
from ._backends.runtime import Erasure, RuntimeBackend, Scope, ScopeInfo

__all__ = [
    "Erasure",
    "FileKnowledgeBackend",
    "FileRuntimeBackend",
    "InMemoryKnowledgeBackend",
    "InMemoryRuntimeBackend",
    "KnowledgeBackend",
    "NoteChanges",
    "NoteInfo",
    "RuntimeBackend",
    "Scope",
    "ScopeInfo",
    "VectorCache",
]
