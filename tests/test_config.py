from __future__ import annotations

from pathlib import Path

import pytest

from local_ai_memory import ConfigError, MemoryConfig


def test_defaults_match_the_original_design() -> None:
    config = MemoryConfig()
    assert config.enabled is True
    assert config.categories == ("knowledge",)
    assert config.search_mode == "bm25"
    assert config.hybrid_bm25_weight == 0.5
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
