"""The storage contract and the backends that ship with the package.

A backend keeps what the engines store; :class:`RuntimeBackend` is the contract of the runtime
levels (L0-L3 and the session log), :class:`KnowledgeBackend` the one of the knowledge notes
(notes, a change feed, derived data). Pass them to :class:`~local_ai_memory.Memory`
(``runtime=``, ``knowledge=``) or use :meth:`Memory.in_memory`. :mod:`local_ai_memory.testing`
holds the conformance suites every backend must pass; ``docs/architecture.md`` explains how to
write one. Everything a :class:`RuntimeBackend` signature names is exported here
(:class:`StoredMessage`, :class:`ToolIndexEntry`, :class:`ToolResultPage`, :data:`StateChange`,
:data:`PlansChange`, :func:`split_step` / :func:`join_step` with :data:`STEP_BYTES_KEY`, and
:func:`erased` to test a scope against pending erasures), and so is the :class:`Embedder`
protocol a :meth:`KnowledgeBackend.vector_cache` receives, so a backend needs no private module.

The PostgreSQL backends (:class:`PostgresRuntimeBackend`, :class:`PostgresKnowledgeBackend`)
need the ``postgres`` extra; they are imported on first use, so this module imports without it.
"""

from typing import TYPE_CHECKING, Any

from local_ai_memory._backends.files.knowledge import FileKnowledgeBackend
from local_ai_memory._backends.files.runtime import FileRuntimeBackend
from local_ai_memory._backends.memory.knowledge import InMemoryKnowledgeBackend
from local_ai_memory._backends.memory.runtime import InMemoryRuntimeBackend
from local_ai_memory._contracts.knowledge import (
    ERASING_DIR,
    BlobAppend,
    KnowledgeBackend,
    NoteChanges,
    NoteInfo,
    NoteKey,
    NoteVersions,
    OwnerListing,
    VectorCache,
    erasure_marker,
    is_note_name,
)
from local_ai_memory._contracts.runtime import (
    STEP_BYTES_KEY,
    Erasure,
    PlansChange,
    PlanSteps,
    RuntimeBackend,
    Scope,
    ScopeInfo,
    StateChange,
    StepsChange,
    erased,
    join_step,
    split_step,
)
from local_ai_memory._shared.models import Embedder
from local_ai_memory._shared.naming import note_filename, owner_of, user_file_prefix
from local_ai_memory._shared.records import StoredMessage, ToolIndexEntry, ToolResultPage
from local_ai_memory._shared.vectors import model_id_of, text_digest, unit_vectors

if TYPE_CHECKING:
    from local_ai_memory._backends.postgres.knowledge import PostgresKnowledgeBackend
    from local_ai_memory._backends.postgres.runtime import PostgresRuntimeBackend

__all__ = [
    "STEP_BYTES_KEY",
    "BlobAppend",
    "Embedder",
    "Erasure",
    "FileKnowledgeBackend",
    "FileRuntimeBackend",
    "InMemoryKnowledgeBackend",
    "InMemoryRuntimeBackend",
    "KnowledgeBackend",
    "NoteChanges",
    "NoteInfo",
    "NoteVersions",
    "OwnerListing",
    "PlanSteps",
    "PlansChange",
    "PostgresKnowledgeBackend",
    "PostgresRuntimeBackend",
    "RuntimeBackend",
    "Scope",
    "ScopeInfo",
    "StateChange",
    "StepsChange",
    "StoredMessage",
    "ToolIndexEntry",
    "ToolResultPage",
    "VectorCache",
    "erased",
    "join_step",
    "split_step",
]

# What a knowledge backend author needs besides the contract: the naming rules (which names are
# notes, whose they are), the erasure markers, and the vector rules (identity, unit scaling).
# See docs/writing-a-backend-knowledge.md.
__all__ += [
    "ERASING_DIR",
    "NoteKey",
    "erasure_marker",
    "is_note_name",
    "model_id_of",
    "note_filename",
    "owner_of",
    "text_digest",
    "unit_vectors",
    "user_file_prefix",
]

_POSTGRES = {
    "PostgresRuntimeBackend": "local_ai_memory._backends.postgres.runtime",
    "PostgresKnowledgeBackend": "local_ai_memory._backends.postgres.knowledge",
}


def __getattr__(name: str) -> Any:
    """The PostgreSQL backends, imported when first asked for (psycopg is an optional extra)."""
    if name in _POSTGRES:
        import importlib

        return getattr(importlib.import_module(_POSTGRES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
