"""The result and record types the library hands back (for type hints and ``isinstance``)."""

from ._archive import ArchiveManifest, ImportReport
from ._compressor import CompressionResult
from ._context import BuiltContext
from ._envelopes import AgentCheckpoint, CheckpointStatus, ToolResultPage
from ._lifecycle import ErasureReport, ScopeReport, UserInfo
from ._messages import Message
from ._retriever import RetrievalResult, RetrievedFile
from ._run import RunOutcome
from ._store import Candidate
from ._tool_results import ToolResultReference

__all__ = [
    "AgentCheckpoint",
    "ArchiveManifest",
    "BuiltContext",
    "Candidate",
    "CheckpointStatus",
    "CompressionResult",
    "ErasureReport",
    "ImportReport",
    "Message",
    "RetrievalResult",
    "RetrievedFile",
    "RunOutcome",
    "ScopeReport",
    "ToolResultPage",
    "ToolResultReference",
    "UserInfo",
]
