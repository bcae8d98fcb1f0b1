"""One version: the core's distribution takes it from ``__version__`` and the integrations match.

The checks read the build configuration (``pyproject.toml``) the way hatchling does, so they
hold for a wheel built now. The installed metadata is compared too; an editable install made
before the version became dynamic still says 0.1.0 until it is reinstalled (``scripts/test``
and ``scripts/demo`` reinstall when a ``pyproject.toml`` changes), and only then is skipped.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import local_ai_memory

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads TOML without a package")
ROOT = Path(__file__).resolve().parent.parent
INTEGRATIONS = {"langchain-local-ai-memory": "langchain", "llama-index-local-ai-memory": "llama-index"}
HATCH_PATTERN = r"""(?i)^(__version__|VERSION) *= *([\'"])v?(?P<version>.+?)\2"""
"""The pattern of hatchling's ``regex`` version source (its default)."""


def pyproject(folder: Path) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def test_the_core_distribution_takes_its_version_from_the_package() -> None:
    config = pyproject(ROOT)
    assert "version" not in config["project"]
    assert config["project"]["dynamic"] == ["version"]
    source = ROOT / config["tool"]["hatch"]["version"]["path"]
    assert source == Path(local_ai_memory.__file__)
    found = re.search(HATCH_PATTERN, source.read_text(encoding="utf-8"), re.MULTILINE)
    assert found is not None
    assert found["version"] == local_ai_memory.__version__
    Version(local_ai_memory.__version__)  # a valid PEP 440 version, or InvalidVersion


@pytest.mark.parametrize("name", sorted(INTEGRATIONS))
def test_the_integrations_share_the_version_and_need_this_core(name: str) -> None:
    project = pyproject(ROOT / "integrations" / INTEGRATIONS[name])["project"]
    assert project["name"] == name
    assert project["version"] == local_ai_memory.__version__
    core = next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "local-ai-memory")
    assert core.specifier.contains(local_ai_memory.__version__, prereleases=True)
    assert not core.specifier.contains("0.1.0")  # 0.1's engines do not take a Memory


def test_installed_metadata_says_the_same_version() -> None:
    installed = importlib.metadata.version("local-ai-memory")
    if installed == "0.1.0" and installed != local_ai_memory.__version__:
        pytest.skip("the editable install predates the dynamic version: reinstall (pip install -e .) to update it")
    assert installed == local_ai_memory.__version__
