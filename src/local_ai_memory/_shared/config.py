"""``MemoryConfig``: every setting with the seed's defaults, from arguments, the environment or YAML.

The YAML file has two sections, as in the original design::

    memory:
      categories: ["knowledge", "work"]
      search_mode: hybrid
    app:
      runtime_data_dir: ~/.local-ai

Keyword arguments use the flat key names: ``MemoryConfig(search_mode="hybrid")``. Each key
can also come from an environment variable, ``LOCAL_AI_MEMORY_<KEY>`` in capitals
(``LOCAL_AI_MEMORY_SEARCH_MODE=hybrid``), except ``runtime_data_dir``, which is
``LOCAL_AI_MEMORY_DATA_DIR`` as the command line has always read it (:data:`ENV_NAMES` lists
them all). A value is taken from the first of: keyword arguments (the ``overrides`` of
:meth:`MemoryConfig.from_yaml`), the environment, the YAML file, the default. An empty
variable counts as unset; ``none`` or ``null`` sets an optional key to ``None``; a list
(``categories``) is comma-separated or a JSON array. Variables that name no key, such as the
model settings read by :func:`~local_ai_memory._models.openai.llm_from_env` (``LOCAL_AI_MEMORY_BASE_URL``,
``LOCAL_AI_MEMORY_MODEL``, ...), are not looked at here.

An unknown key or a value of the wrong type raises :class:`ConfigError` naming where it came
from, e.g. ``memory.hybrid_bm25_weight: Input should be less than or equal to 1`` or
``LOCAL_AI_MEMORY_HYBRID_TOP_N (memory.hybrid_top_n): Input should be a valid integer``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from local_ai_memory._shared.errors import ConfigError
from local_ai_memory._shared.naming import validate_id
from local_ai_memory._shared.text import stemmer_languages

__all__ = ["ENV_NAMES", "ENV_PREFIX", "MemoryConfig"]

ENV_PREFIX = "LOCAL_AI_MEMORY_"
_ENV_EXCEPTIONS = {"runtime_data_dir": "LOCAL_AI_MEMORY_DATA_DIR"}
_NONE_WORDS = frozenset({"none", "null"})
_FILE_VALUES: ContextVar[Mapping[str, Any]] = ContextVar("local_ai_memory_file_values", default=MappingProxyType({}))


def _memory(default: Any, description: str, **kwargs: Any) -> Any:
    return Field(default, description=description, json_schema_extra={"section": "memory"}, **kwargs)


def _app(default: Any, description: str, **kwargs: Any) -> Any:
    return Field(default, description=description, json_schema_extra={"section": "app"}, **kwargs)


class MemoryConfig(BaseSettings):
    """All settings of local-ai-memory. Immutable; use :meth:`replace` to derive a variant.

    Values come from keyword arguments, then ``LOCAL_AI_MEMORY_*`` variables, then (through
    :meth:`from_yaml` / :meth:`from_mapping`) the file, then the defaults.
    """

    model_config = SettingsConfigDict(extra="forbid", frozen=True, strict=False)

    enabled: bool = _memory(True, "Master switch for both runtime and knowledge memory.")
    categories: tuple[str, ...] = _memory(("knowledge",), "Knowledge categories, one folder each.")
    search_mode: Literal["bm25", "hybrid"] = _memory(
        "bm25", "Stage 1 ranking: BM25 alone or BM25 fused with embeddings."
    )
    hybrid_bm25_weight: float = _memory(
        0.5, "Weight of BM25 against embedding similarity in hybrid score fusion (0..1).", ge=0.0, le=1.0
    )
    hybrid_top_n: int = _memory(10, "Candidates taken from each ranking before fusion in hybrid mode.", ge=1, le=1000)
    hybrid_passages: int = _memory(
        257,
        "Passages embedded per note at most in hybrid mode (its lead and the first body passages); "
        "every lower cap measured lost held-out natural questions.",
        ge=1,
        le=100_000,
    )
    stemmer_language: str | None = _memory(
        "english", "Stemming language of Stage 1 BM25 (a Snowball language, e.g. german; none: no stemming)."
    )
    auto_watch: bool = _memory(
        True,
        "A searched file store watches its notes in a background thread, so queries do no per-file work.",
    )
    owner_cache_mb: float = _memory(
        48.0,
        "Megabytes of users' index entries and rankers a process keeps in memory, over every user "
        "it serves (least recently asked users are let go first and read again when asked; the last "
        "one asked always stays). About 1-1.3 MB per user with 200 notes of 1-4 KB.",
        gt=0,
    )
    remember_conversations: bool = _memory(
        True,
        "Append each finished run's turns to the user's conversation log (a note per session in "
        "the conversations category), which recall searches in later sessions.",
    )
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
    database_url: str | None = _app(
        None, "PostgreSQL URL (postgresql://user@host/db): keep everything there instead of in files.", repr=False
    )
    database_schema: str = _app(
        "local_ai_memory", "PostgreSQL schema holding the tables.", pattern=r"^[a-z_][a-z0-9_]{0,62}$"
    )
    database_pool_min_size: int = _app(1, "Connections each process keeps open.", ge=0, le=1000)
    database_pool_max_size: int = _app(10, "Most connections each process opens.", ge=1, le=1000)
    database_pool_timeout: float = _app(30.0, "Seconds to wait for a free pooled connection.", gt=0)
    database_connect_timeout: float = _app(10.0, "Seconds to wait for the server when connecting.", gt=0)
    database_prepare_threshold: int | None = _app(
        5, "Executions before a statement is prepared server-side (None: never, for PgBouncer).", ge=0
    )

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

    @field_validator("stemmer_language", mode="after")
    @classmethod
    def _check_language(cls, value: str | None) -> str | None:
        if value is None or value.strip().lower() in _NONE_WORDS | {"off", ""}:
            return None
        language = value.strip().lower()
        if language not in stemmer_languages():
            raise ValueError(f"no stemmer for {value!r}: choose one of {', '.join(stemmer_languages())} or none")
        return language

    @field_validator("runtime_data_dir", mode="after")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, _flat_sections(), _origins(data))) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then our own environment variables, then the YAML file (no ``.env``, no secrets dir)."""
        return init_settings, _Environment(settings_cls), _FileValues(settings_cls)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> MemoryConfig:
        """Build from a ``{"memory": {...}, "app": {...}}`` mapping under the environment and ``overrides``."""
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
        with _file_values(flat):
            return cls(**overrides)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], **overrides: Any) -> MemoryConfig:
        """Load a ``config.yaml`` with ``memory:`` and ``app:`` sections.

        ``LOCAL_AI_MEMORY_*`` variables take precedence over the file, ``overrides`` over both.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        import yaml  # here, not at the top: a command without a config file never parses YAML

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected 'memory:' and 'app:' sections at the top level")
        return cls.from_mapping(data, **overrides)

    def replace(self, **changes: Any) -> MemoryConfig:
        """Return a copy with ``changes`` applied and validated (the environment is not read again)."""
        return MemoryConfig(**{**self.model_dump(), **changes})

    def to_mapping(self) -> dict[str, dict[str, Any]]:
        """The settings as ``{"memory": {...}, "app": {...}}`` (JSON-compatible values)."""
        out: dict[str, dict[str, Any]] = {"memory": {}, "app": {}}
        dumped = self.model_dump(mode="json")
        for key, section in _flat_sections().items():
            out[section][key] = dumped[key]
        return out


def env_name(key: str) -> str:
    """The environment variable of a config key: ``LOCAL_AI_MEMORY_<KEY>`` (``runtime_data_dir``: ``..._DATA_DIR``)."""
    return _ENV_EXCEPTIONS.get(key, ENV_PREFIX + key.upper())


def _flat_sections() -> dict[str, str]:
    sections: dict[str, str] = {}
    for name, field in MemoryConfig.model_fields.items():
        extra = field.json_schema_extra
        assert isinstance(extra, dict)
        sections[name] = str(extra["section"])
    return sections


ENV_NAMES: Mapping[str, str] = {key: env_name(key) for key in MemoryConfig.model_fields}
"""Every config key and the environment variable it is read from."""


@contextmanager
def _file_values(values: Mapping[str, Any]) -> Iterator[None]:
    """Hand the flattened YAML values to the next ``MemoryConfig(...)`` made in this context."""
    token = _FILE_VALUES.set(values)
    try:
        yield
    finally:
        _FILE_VALUES.reset(token)


def _env_value(key: str, name: str, raw: str) -> Any:
    """A variable's text as a value for ``key`` (pydantic converts and checks it afterwards)."""
    if raw.strip().lower() in _NONE_WORDS and type(None) in _accepted_types(key):
        return None
    if key == "categories":
        text = raw.strip()
        if not text.startswith("["):
            return [part.strip() for part in text.split(",") if part.strip()]
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{name} (memory.categories): not a JSON array: {exc.msg}") from None
    return raw


def _accepted_types(key: str) -> tuple[Any, ...]:
    annotation = MemoryConfig.model_fields[key].annotation
    return tuple(getattr(annotation, "__args__", (annotation,)))


class _Environment(PydanticBaseSettingsSource):
    """``LOCAL_AI_MEMORY_<KEY>`` variables (see :data:`ENV_NAMES`); empty ones count as unset."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = env_name(field_name)
        return os.environ.get(name), name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, field in self.settings_cls.model_fields.items():
            raw, name, _ = self.get_field_value(field, key)
            if raw:
                values[key] = _env_value(key, name, raw)
        return values


class _FileValues(PydanticBaseSettingsSource):
    """The flattened ``config.yaml`` values given by :meth:`MemoryConfig.from_mapping` (else nothing)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return _FILE_VALUES.get().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get())


def _origins(arguments: Mapping[str, Any]) -> dict[str, str]:
    """Keys whose value came from the environment (not overridden by an argument) -> variable name."""
    return {key: name for key, name in ENV_NAMES.items() if key not in arguments and os.environ.get(name)}


def _explain(exc: ValidationError, sections: dict[str, str], origins: Mapping[str, str]) -> str:
    lines = []
    for error in exc.errors():
        key = str(error["loc"][0]) if error["loc"] else "?"
        where = f"{sections[key]}.{key}" if key in sections else key
        if key in origins:
            where = f"{origins[key]} ({where})"
        message = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"{where}: {message}")
    return "; ".join(lines)
