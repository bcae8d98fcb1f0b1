"""The result and record types the library hands back (for type hints and ``isinstance``)."""

from local_ai_memory._knowledge.recall import Recall, RecalledPassage
from local_ai_memory._knowledge.retriever import RetrievalResult, RetrievedFile
from local_ai_memory._knowledge.store import Candidate
from local_ai_memory._memory import NoteName
from local_ai_memory._operations.archive import ArchiveManifest, ImportReport
from local_ai_memory._operations.lifecycle import ErasureReport, ScopeReport, UserInfo
from local_ai_memory._runtime.compressor import CompressionResult
from local_ai_memory._runtime.context import BuiltContext
from local_ai_memory._runtime.messages import Message
from local_ai_memory._runtime.run import RunOutcome
from local_ai_memory._runtime.tool_results import ToolResultReference
from local_ai_memory._shared.records import AgentCheckpoint, CheckpointStatus, ToolResultPage

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
    "NoteName",
    "Recall",
    "RecalledPassage",
    "RetrievalResult",
    "RetrievedFile",
    "RunOutcome",
    "ScopeReport",
    "ToolResultPage",
    "ToolResultReference",
    "UserInfo",
]
