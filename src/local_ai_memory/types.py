"""The result and record types the library hands back (for type hints and ``isinstance``)."""

from ._compressor import CompressionResult
from ._context import BuiltContext
from ._envelopes import AgentCheckpoint, CheckpointStatus, ToolResultPage
from ._messages import Message
from ._retriever import RetrievalResult, RetrievedFile
from ._run import RunOutcome
from ._store import Candidate
from ._tool_results import ToolResultReference

__all__ = [
    "AgentCheckpoint",
    "BuiltContext",
    "Candidate",
    "CheckpointStatus",
    "CompressionResult",
    "Message",
    "RetrievalResult",
    "RetrievedFile",
    "RunOutcome",
    "ToolResultPage",
    "ToolResultReference",
]
