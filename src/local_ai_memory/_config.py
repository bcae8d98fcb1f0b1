"""``MemoryConfig``: every setting with the seed's defaults, from YAML or keyword arguments.

The YAML file has two sections, as in the original design::

    memory:
      categories: ["knowledge", "work"]
      search_mode: hybrid
    app:
      runtime_data_dir: ~/.local-ai

Keyword arguments use the flat key names: ``MemoryConfig(search_mode="hybrid")``. An unknown
key or a value of the wrong type raises :class:`ConfigError` naming the key, e.g.
``memory.hybrid_bm25_weight: Input should be less than or equal to 1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._errors import ConfigError
from ._guard import validate_id

__all__ = ["MemoryConfig"]


def _memory(default: Any, description: str, **kwargs: Any) -> Any:
    return Field(default, description=description, json_schema_extra={"section": "memory"}, **kwargs)


def _app(default: Any, description: str, **kwargs: Any) -> Any:
    return Field(default, description=description, json_schema_extra={"section": "app"}, **kwargs)


class MemoryConfig(BaseModel):
    """All settings of local-ai-memory. Immutable; use :meth:`replace` to derive a variant."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    enabled: bool = _memory(True, "Master switch for both runtime and knowledge memory.")
    categories: tuple[str, ...] = _memory(("knowledge",), "Knowledge categories, one folder each.")
    search_mode: Literal["bm25", "hybrid"] = _memory(
        "bm25", "Stage 1 ranking: BM25 alone or BM25 fused with embeddings."
    )
    hybrid_bm25_weight: float = _memory(0.5, "Weight of BM25 in reciprocal rank fusion (0..1).", ge=0.0, le=1.0)
    hybrid_top_n: int = _memory(10, "Candidates taken from each ranking before fusion in hybrid mode.", ge=1, le=1000)
    working_memory_enabled: bool = _memory(True, "Read and compress L1 working memory.")
    working_memory_target_tokens: int = _memory(768, "Token budget of the L1 summary.", ge=32, le=100_000)
    working_memory_compact_keep_last: int = _memory(6, "Messages kept in the session after compaction.", ge=0)
    working_memory_history_limit: int = _memory(20, "Session length above which a run ends in compaction.", ge=0)
    token_encoding: Literal["cl100k_base", "o200k_base"] = _memory(
        "cl100k_base", "tiktoken encoding used to count tokens."
    )
    fsync: bool = _memory(True, "fsync files and folders on every write (durable against power loss).")
    lock_timeout: float = _memory(30.0, "Seconds to wait for a cross-process lock.", gt=0)
    runtime_data_dir: Path = _app(
        Path("~/.local-ai"), "Root folder of every file the library writes.", validate_default=True
    )
    tool_result_inline_limit: int = _app(6144, "Tool outputs above this many UTF-8 bytes are moved to L3.", ge=0)
    tool_result_summary_max_chars: int = _app(1000, "Characters of an externalized output shown inline.", ge=0)
    tool_result_max_count: int | None = _app(500, "Stored tool results kept per scope (None: no bound).", ge=0)
    tool_result_max_bytes: int | None = _app(512 * 1024 * 1024, "Bytes of stored tool results per scope.", ge=0)
    tool_result_max_age_seconds: float | None = _app(None, "Stored tool results older than this are pruned.", gt=0)

    @field_validator("categories", mode="after")
    @classmethod
    def _check_categories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one category is required")
        for name in value:
            validate_id(name, "category")
        if len(set(value)) != len(value):
            raise ValueError("categories must be unique")
        return value

    @field_validator("runtime_data_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, _flat_sections())) from None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> MemoryConfig:
        """Build from a ``{"memory": {...}, "app": {...}}`` mapping, then apply ``overrides``."""
        sections = _flat_sections()
        flat: dict[str, Any] = {}
        for section, values in data.items():
            if section not in ("memory", "app"):
                raise ConfigError(f"{section}: unknown section (expected 'memory' or 'app')")
            if values is None:
                continue
            if not isinstance(values, Mapping):
                raise ConfigError(f"{section}: expected a mapping of keys, got {type(values).__name__}")
            for key, value in values.items():
                if sections.get(key) != section:
                    where = f" (it belongs in '{sections[key]}')" if key in sections else ""
                    raise ConfigError(f"{section}.{key}: unknown key{where}")
                flat[key] = value
        flat.update(overrides)
        return cls(**flat)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], **overrides: Any) -> MemoryConfig:
        """Load a ``config.yaml`` with ``memory:`` and ``app:`` sections."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected 'memory:' and 'app:' sections at the top level")
        return cls.from_mapping(data, **overrides)

    def replace(self, **changes: Any) -> MemoryConfig:
        """Return a copy with ``changes`` applied and validated."""
        return MemoryConfig(**{**self.model_dump(), **changes})

    def to_mapping(self) -> dict[str, dict[str, Any]]:
        """The settings as ``{"memory": {...}, "app": {...}}`` (JSON-compatible values)."""
        out: dict[str, dict[str, Any]] = {"memory": {}, "app": {}}
        dumped = self.model_dump(mode="json")
        for key, section in _flat_sections().items():
            out[section][key] = dumped[key]
        return out


def _flat_sections() -> dict[str, str]:
    sections: dict[str, str] = {}
    for name, field in MemoryConfig.model_fields.items():
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        sections[name] = str(extra["section"])
    return sections


def _explain(exc: ValidationError, sections: dict[str, str]) -> str:
    lines = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else "?"
        where = f"{sections[key]}.{key}" if key in sections else key
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"{where}: {message}")
    return "; ".join(lines)
