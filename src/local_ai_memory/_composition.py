"""The composition root: the one place that turns a :class:`MemoryConfig` into storage backends.

Engines receive their backend and never choose one; adapters receive a ``Memory``. So this
module is the only one (beside the public :mod:`local_ai_memory.backends`) that names a
concrete backend, and the rule "which storage does this config mean" is written once:

* ``runtime=`` / ``knowledge=`` given: used as they are.
* ``config.database_url`` set: PostgreSQL for whichever of the two was not given, on one
  connection pool, its schema set up now so a wrong URL fails here and not at the first write.
* otherwise: plain files under ``config.runtime_data_dir``. A memory given a custom runtime
  backend but no knowledge backend keeps its notes there only when the data folder was named
  (``Memory.open(root, ...)`` or ``runtime_data_dir=``); else it refuses, naming both ways out,
  rather than writing notes under the default ``~/.local-ai`` unasked.

It also gives a memory its embedder (:func:`embedder_for`): the one passed, else, when
``config.search_mode`` is ``hybrid``, the local all-MiniLM-L6-v2 model on ONNX Runtime, or a
:class:`ConfigError` naming the extra to install. A hybrid memory never answers by BM25 alone
because nobody passed an embedder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from local_ai_memory._contracts.knowledge import KnowledgeBackend
from local_ai_memory._contracts.runtime import RuntimeBackend
from local_ai_memory._shared.config import MemoryConfig
from local_ai_memory._shared.errors import ConfigError
from local_ai_memory._shared.naming import DirectoryGuard

if TYPE_CHECKING:  # each backend is imported by the function that builds it: a files memory loads no other
    from local_ai_memory._backends.memory.knowledge import InMemoryKnowledgeBackend
    from local_ai_memory._backends.memory.runtime import InMemoryRuntimeBackend
    from local_ai_memory._shared.models import Embedder

__all__ = ["Backends", "compose", "embedder_for", "in_memory_backends"]


@dataclass(frozen=True)
class Backends:
    """The storage a memory runs on; ``guard`` is the data folder when anything is kept in files."""

    runtime: RuntimeBackend
    knowledge: KnowledgeBackend
    guard: DirectoryGuard | None


def in_memory_backends() -> tuple[InMemoryRuntimeBackend, InMemoryKnowledgeBackend]:
    """A fresh pair of in-process backends (nothing touches a disk)."""
    from local_ai_memory._backends.memory.knowledge import InMemoryKnowledgeBackend
    from local_ai_memory._backends.memory.runtime import InMemoryRuntimeBackend

    return InMemoryRuntimeBackend(), InMemoryKnowledgeBackend()


def compose(
    config: MemoryConfig,
    runtime: RuntimeBackend | None = None,
    knowledge: KnowledgeBackend | None = None,
    *,
    folder_named: bool = True,
) -> Backends:
    """The backends ``config`` means, keeping the ones passed in (see the module docstring).

    ``folder_named`` is whether the caller chose the data folder (a config built with
    ``runtime_data_dir``, or ``Memory.open(root)``); it matters only for a custom runtime
    backend without a knowledge backend.
    """
    if config.database_url and (runtime is None or knowledge is None):
        runtime, knowledge = _postgres(config, runtime, knowledge)
    if runtime is not None and knowledge is None and not folder_named:
        raise ConfigError(
            "a memory with its own runtime backend needs to know where the notes go: pass "
            "knowledge=<a KnowledgeBackend> (e.g. InMemoryKnowledgeBackend()), or name the data "
            "folder with Memory.open(root, runtime=...) or MemoryConfig(runtime_data_dir=...)"
        )
    guard = DirectoryGuard(config.runtime_data_dir) if runtime is None or knowledge is None else None
    if runtime is None:
        from local_ai_memory._backends.files.runtime import FileRuntimeBackend

        runtime = FileRuntimeBackend.from_config(config, guard)
    if knowledge is None:
        from local_ai_memory._backends.files.knowledge import FileKnowledgeBackend

        assert guard is not None
        knowledge = FileKnowledgeBackend(guard, config)
    return Backends(runtime, knowledge, guard)


def embedder_for(config: MemoryConfig, embedder: Embedder | None) -> Embedder | None:
    """The embedder a memory of ``config`` uses: ``embedder`` when given; else the local model
    (:func:`.onnx_file.local_embedder`, nothing loaded until the first embedding) when the mode
    is hybrid, or :class:`ConfigError` when its packages are missing; else none (BM25)."""
    if embedder is not None or config.search_mode != "hybrid":
        return embedder
    from local_ai_memory._models.onnx_file import local_embedder

    return local_embedder()


def _postgres(
    config: MemoryConfig, runtime: RuntimeBackend | None, knowledge: KnowledgeBackend | None
) -> tuple[RuntimeBackend, KnowledgeBackend]:
    """Both PostgreSQL backends of ``config.database_url`` on one database handle, schema set up now."""
    try:
        from local_ai_memory._backends.postgres.knowledge import PostgresKnowledgeBackend
        from local_ai_memory._backends.postgres.runtime import PostgresRuntimeBackend
    except ImportError as exc:  # pragma: no cover - the extra is part of the test environment
        raise ConfigError(
            f"database_url needs the PostgreSQL driver: pip install 'local-ai-memory[postgres]' ({exc})"
        ) from None
    pg_runtime = PostgresRuntimeBackend.from_config(config)
    pg_runtime.setup()
    if runtime is None:
        runtime = pg_runtime
    if knowledge is None:
        knowledge = PostgresKnowledgeBackend.from_config(config, database=pg_runtime.db)
    return runtime, knowledge
