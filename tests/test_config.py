from __future__ import annotations

import re
from pathlib import Path

import pytest

from local_ai_memory import ConfigError, MemoryConfig
from local_ai_memory._models.openai import ENV_API_KEY, ENV_BASE_URL, ENV_EMBEDDING_MODEL, ENV_MODEL
from local_ai_memory._shared.config import ENV_NAMES


def test_defaults_match_the_original_design() -> None:
    config = MemoryConfig()
    assert config.enabled is True
    assert config.categories == ("knowledge",)
    assert config.search_mode == "bm25"
    assert config.hybrid_bm25_weight == 0.5  # z-score fusion, passage max (bench_natural_questions.py)
    assert config.hybrid_top_n == 10
    assert config.working_memory_enabled is True
    assert config.working_memory_target_tokens == 768
    assert config.working_memory_compact_keep_last == 6
    assert config.tool_result_inline_limit == 6144
    assert config.tool_result_summary_max_chars == 1000
    assert config.runtime_data_dir == Path("~/.local-ai").expanduser()


def test_yaml_sections_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory:\n  categories: [knowledge, work]\n  search_mode: hybrid\n"
        "app:\n  runtime_data_dir: ~/elsewhere\n  tool_result_inline_limit: 100\n",
        encoding="utf-8",
    )
    config = MemoryConfig.from_yaml(path, hybrid_top_n=3)
    assert config.categories == ("knowledge", "work")
    assert config.search_mode == "hybrid"
    assert config.runtime_data_dir == Path.home() / "elsewhere"
    assert config.tool_result_inline_limit == 100
    assert config.hybrid_top_n == 3
    assert MemoryConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("memory:\n  serch_mode: bm25\n", "memory.serch_mode: unknown key"),
        ("memory:\n  runtime_data_dir: /x\n", "memory.runtime_data_dir: unknown key (it belongs in 'app')"),
        ("memory:\n  hybrid_bm25_weight: 1.5\n", "memory.hybrid_bm25_weight"),
        ("memory:\n  search_mode: vector\n", "memory.search_mode"),
        ("app:\n  tool_result_inline_limit: lots\n", "app.tool_result_inline_limit"),
        ("memory:\n  categories: ['../etc']\n", "memory.categories"),
        ("storage:\n  x: 1\n", "storage: unknown section"),
        ("- just\n- a list\n", "top level"),
        ("memory: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_yaml_names_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        MemoryConfig.from_yaml(path)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_keyword_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"memory\.working_memory_target_tokens"):
        MemoryConfig(working_memory_target_tokens="many")
    with pytest.raises(ConfigError, match="unknown key"):
        MemoryConfig(no_such_key=1)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        MemoryConfig.from_yaml(tmp_path / "absent.yaml")


def test_replace_validates_and_keeps_the_original() -> None:
    config = MemoryConfig()
    changed = config.replace(search_mode="hybrid")
    assert (config.search_mode, changed.search_mode) == ("bm25", "hybrid")
    with pytest.raises(ConfigError):
        config.replace(hybrid_top_n=0)


# -- the environment ------------------------------------------------------------------------


def test_every_key_has_one_documented_variable() -> None:
    assert ENV_NAMES["runtime_data_dir"] == "LOCAL_AI_MEMORY_DATA_DIR"
    assert ENV_NAMES["search_mode"] == "LOCAL_AI_MEMORY_SEARCH_MODE"
    assert set(ENV_NAMES) == set(MemoryConfig.model_fields)
    assert len(set(ENV_NAMES.values())) == len(ENV_NAMES)
    model_variables = {ENV_BASE_URL, ENV_MODEL, ENV_API_KEY, ENV_EMBEDDING_MODEL}
    assert model_variables.isdisjoint(ENV_NAMES.values())
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert "LOCAL_AI_MEMORY_DATA_DIR" in readme
    assert "LOCAL_AI_MEMORY_<KEY>" in readme


def test_variables_set_every_kind_of_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATA_DIR", str(tmp_path / "root"))
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "hybrid")
    monkeypatch.setenv("LOCAL_AI_MEMORY_CATEGORIES", "knowledge, work")
    monkeypatch.setenv("LOCAL_AI_MEMORY_HYBRID_BM25_WEIGHT", "0.25")
    monkeypatch.setenv("LOCAL_AI_MEMORY_HYBRID_TOP_N", "7")
    monkeypatch.setenv("LOCAL_AI_MEMORY_FSYNC", "false")
    monkeypatch.setenv("LOCAL_AI_MEMORY_TOOL_RESULT_MAX_COUNT", "none")
    monkeypatch.setenv("LOCAL_AI_MEMORY_TOOL_RESULT_MAX_AGE_SECONDS", "3600")
    config = MemoryConfig()
    assert config.runtime_data_dir == tmp_path / "root"
    assert config.search_mode == "hybrid"
    assert config.categories == ("knowledge", "work")
    assert config.hybrid_bm25_weight == 0.25
    assert config.hybrid_top_n == 7
    assert config.fsync is False
    assert config.tool_result_max_count is None
    assert config.tool_result_max_age_seconds == 3600.0
    monkeypatch.setenv("LOCAL_AI_MEMORY_CATEGORIES", '["notes", "work"]')
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATA_DIR", "~/from-env")
    config = MemoryConfig()
    assert config.categories == ("notes", "work")
    assert config.runtime_data_dir == Path.home() / "from-env"


def test_precedence_arguments_environment_file_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory:\n  hybrid_top_n: 2\n  search_mode: hybrid\n  lock_timeout: 5\n"
        "app:\n  runtime_data_dir: /from/file\n  tool_result_inline_limit: 100\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("LOCAL_AI_MEMORY_HYBRID_TOP_N", "3")
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "bm25")
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATA_DIR", "/from/env")
    config = MemoryConfig.from_yaml(path, hybrid_top_n=4)
    assert config.hybrid_top_n == 4  # argument over environment and file
    assert config.search_mode == "bm25"  # environment over file
    assert config.runtime_data_dir == Path("/from/env")
    assert config.lock_timeout == 5.0  # file over default
    assert config.tool_result_inline_limit == 100
    assert config.working_memory_target_tokens == 768  # default
    assert MemoryConfig(hybrid_top_n=9).hybrid_top_n == 9
    assert MemoryConfig().hybrid_top_n == 3
    monkeypatch.delenv("LOCAL_AI_MEMORY_HYBRID_TOP_N")
    assert MemoryConfig.from_yaml(path).hybrid_top_n == 2
    assert MemoryConfig().hybrid_top_n == 10


def test_empty_variables_and_the_model_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "")
    monkeypatch.setenv("LOCAL_AI_MEMORY_DATA_DIR", "")
    for name in (ENV_BASE_URL, ENV_MODEL, ENV_API_KEY, ENV_EMBEDDING_MODEL, "LOCAL_AI_MEMORY_RECORD_CASSETTES"):
        monkeypatch.setenv(name, "not-a-setting")
    assert MemoryConfig() == MemoryConfig(runtime_data_dir="~/.local-ai")


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("LOCAL_AI_MEMORY_HYBRID_TOP_N", "lots", "LOCAL_AI_MEMORY_HYBRID_TOP_N (memory.hybrid_top_n): Input should be"),
        ("LOCAL_AI_MEMORY_HYBRID_BM25_WEIGHT", "2", "LOCAL_AI_MEMORY_HYBRID_BM25_WEIGHT (memory.hybrid_bm25_weight)"),
        ("LOCAL_AI_MEMORY_SEARCH_MODE", "vector", "LOCAL_AI_MEMORY_SEARCH_MODE (memory.search_mode)"),
        ("LOCAL_AI_MEMORY_FSYNC", "maybe", "LOCAL_AI_MEMORY_FSYNC (memory.fsync)"),
        ("LOCAL_AI_MEMORY_CATEGORIES", "../etc", "LOCAL_AI_MEMORY_CATEGORIES (memory.categories)"),
        ("LOCAL_AI_MEMORY_CATEGORIES", '["open', "LOCAL_AI_MEMORY_CATEGORIES (memory.categories): not a JSON array"),
        ("LOCAL_AI_MEMORY_LOCK_TIMEOUT", "none", "LOCAL_AI_MEMORY_LOCK_TIMEOUT (memory.lock_timeout)"),
        ("LOCAL_AI_MEMORY_TOOL_RESULT_MAX_BYTES", "-1", "LOCAL_AI_MEMORY_TOOL_RESULT_MAX_BYTES (app.tool_result"),
    ],
)
def test_bad_variables_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        MemoryConfig()
    assert fragment in str(info.value)
    with pytest.raises(ConfigError, match=re.escape(name)):
        MemoryConfig.from_mapping({"memory": {"hybrid_top_n": 2}})


def test_an_argument_hides_a_bad_variable_and_replace_does_not_reread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_AI_MEMORY_HYBRID_TOP_N", "lots")
    assert MemoryConfig(hybrid_top_n=5).hybrid_top_n == 5
    with pytest.raises(ConfigError, match=r"^memory\.hybrid_top_n: Input should be greater"):
        MemoryConfig(hybrid_top_n=0)  # the argument's own error, not the variable's
    monkeypatch.delenv("LOCAL_AI_MEMORY_HYBRID_TOP_N")
    config = MemoryConfig()
    monkeypatch.setenv("LOCAL_AI_MEMORY_SEARCH_MODE", "hybrid")
    assert config.replace(hybrid_top_n=3).search_mode == "bm25"
