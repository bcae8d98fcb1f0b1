"""The import rules of the core's layers, checked on the source (every import, also late ones).

Top to bottom: the entry point and its public modules, whole-memory operations, the runtime and
knowledge engines (independent of each other), model clients, the storage contracts, and the
pure shared pieces. A module imports only from its own layer or below. Backends (one folder
each) see only the contracts, the shared bottom and their own folder, and only the composition
root and the public ``local_ai_memory.backends`` name a concrete backend. No exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "local_ai_memory"
SOURCE = Path(__file__).resolve().parent.parent / "src" / PACKAGE

ENTRY = 6
RANKS = {"_operations": 5, "_runtime": 4, "_knowledge": 4, "_models": 3, "_contracts": 2, "_shared": 1}
"""The layer of each private folder; every other module of the package is the entry point."""
NAMING_BACKENDS = {f"{PACKAGE}._composition", f"{PACKAGE}.backends"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, ``from x import y`` as ``x.y`` too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def folder_of(module: str) -> str | None:
    """The private folder (``_runtime``, ``_backends``...) a module lives in, ``None`` at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1].startswith("_") and (SOURCE / parts[1]).is_dir() else None


def rank(module: str) -> int:
    return RANKS.get(folder_of(module) or "", ENTRY)


def is_module(module: str) -> bool:
    path = SOURCE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def broken_rules(me: str, targets: set[str]) -> list[str]:
    """What ``me`` importing ``targets`` breaks of the rules (empty: nothing)."""
    mine = folder_of(me)
    wrong: list[str] = []
    for target in sorted(targets):
        theirs = folder_of(target)
        if theirs == "_backends":
            if mine == "_backends":
                if target.split(".")[2] != me.split(".")[2] and target.count(".") > 2:
                    wrong.append(f"{me} -> {target}: a backend imports another backend")
            elif me not in NAMING_BACKENDS:
                wrong.append(f"{me} -> {target}: only the composition root names a concrete backend")
        elif mine == "_backends":
            if theirs not in ("_contracts", "_shared"):
                wrong.append(f"{me} -> {target}: backends see only the contracts and the shared bottom")
        elif {mine, theirs} == {"_runtime", "_knowledge"}:
            wrong.append(f"{me} -> {target}: the runtime and knowledge engines are independent")
        elif rank(target) > (ENTRY if mine is None else rank(me)):
            wrong.append(f"{me} -> {target}: imports a higher layer")
    return wrong


MODULES = sorted(SOURCE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_module_keeps_the_import_rules(path: Path) -> None:
    assert broken_rules(module_name(path), {m for m in imported(path) if is_module(m)}) == []


def test_the_rules_see_what_they_check() -> None:
    """The checker itself: imports are found, and each kind of planted import is reported."""
    assert len(MODULES) > 50
    assert f"{PACKAGE}._contracts.runtime" in imported(SOURCE / "_runtime" / "scope.py")
    p = PACKAGE
    planted = {
        f"{p}._runtime.scope": f"{p}._backends.files.runtime",  # an engine naming a backend
        f"{p}._shared.errors": f"{p}._runtime.scope",  # the bottom reaching up
        f"{p}._runtime.run": f"{p}._knowledge.store",  # one engine into the other
        f"{p}._backends.files.knowledge": f"{p}._knowledge.store",  # a backend into an engine
        f"{p}._backends.memory.runtime": f"{p}._backends.files.records",  # a backend into another
        f"{p}._contracts.runtime": f"{p}._models.openai",  # a contract into a model client
    }
    for me, target in planted.items():
        assert broken_rules(me, {target}), f"{me} -> {target} was not reported"
    assert broken_rules(f"{p}._backends.files.runtime", {f"{p}._backends.files.records", f"{p}._shared.fs"}) == []
    assert broken_rules(f"{p}._composition", {f"{p}._backends.postgres.runtime"}) == []
    assert broken_rules(f"{p}._operations.archive", {f"{p}._runtime.scope", f"{p}._knowledge.store"}) == []


MCP = f"{PACKAGE}.mcp"


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import of ``path`` (``mcp``, ``typer``...)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
    return found


def _private(name: str) -> bool:
    """A private part of a dotted name: ``_x``, not a dunder such as ``__version__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def mcp_rules_broken(me: str, targets: set[str], third_party: set[str]) -> list[str]:
    """The MCP server is an adapter: it sees only public names of the core (no ``_x`` module but
    its own), and no module outside it (and the command line that starts it) imports ``mcp``."""
    mine = me == MCP or me.startswith(MCP + ".")
    wrong: list[str] = []
    if mine:
        for target in sorted(targets):
            own = target == MCP or target.startswith(MCP + ".")
            if not own and any(_private(part) for part in target.split(".")[1:]):
                wrong.append(f"{me} -> {target}: the MCP server imports only public names")
    elif "mcp" in third_party and not me.startswith(f"{PACKAGE}._cli."):
        wrong.append(f"{me} imports mcp: only local_ai_memory.mcp may (importing the core must not)")
    return wrong


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_the_mcp_server_is_an_adapter(path: Path) -> None:
    assert mcp_rules_broken(module_name(path), imported(path), third_party_imports(path)) == []


def test_the_mcp_rule_sees_what_it_checks() -> None:
    p = PACKAGE
    assert mcp_rules_broken(f"{MCP}._server", {f"{p}._memory"}, set())
    assert mcp_rules_broken(f"{p}._memory", set(), {"mcp"})
    assert mcp_rules_broken(f"{MCP}._server", {p, f"{p}.integration", f"{MCP}._access"}, {"mcp"}) == []
