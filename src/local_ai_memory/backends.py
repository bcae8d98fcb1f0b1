"""The storage contract and the backends that ship with the package.

A backend keeps what the engines store; :class:`RuntimeBackend` is the contract of the runtime
levels (L0-L3 and the session log). Pass one to :class:`~local_ai_memory.Memory` (``runtime=``)
or use :meth:`Memory.in_memory`. :mod:`local_ai_memory.testing` holds the conformance suite
every backend must pass; ``docs/architecture.md`` explains how to write one.
"""

from ._backends.files import FileRuntimeBackend
from ._backends.memory import InMemoryRuntimeBackend
from ._backends.runtime import RuntimeBackend, Scope, ScopeInfo

__all__ = ["FileRuntimeBackend", "InMemoryRuntimeBackend", "RuntimeBackend", "Scope", "ScopeInfo"]
