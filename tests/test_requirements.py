"""Every third-party package the code imports is pinned in requirements.txt or requirements-dev.txt (STYLE rule 13):
an import that works only because something else happened to install its package breaks when that other package
drops it, and a fresh `make run` or `make test` installs only what the files pin."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ("requirements.txt", "requirements-dev.txt")
NOT_SOURCE = {".venv", "var", ".git", "node_modules", "staticfiles"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==\S+$")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_lines() -> list[tuple[str, str]]:
    lines = []
    for name in REQUIREMENTS:
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-r "):
                lines.append((name, line))
    return lines


def pinned_distributions() -> set[str]:
    return {_normalized(PIN.match(line).group(1)) for _, line in _requirement_lines() if PIN.match(line)}


def source_files() -> list[Path]:
    return [path for path in ROOT.rglob("*.py") if not NOT_SOURCE & set(path.relative_to(ROOT).parts)]


def first_party(path: Path) -> set[str]:
    """Names a file imports from the project itself: the top-level packages and modules, and the modules beside it
    (bench scripts import their neighbours by putting their own folder on sys.path)."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    top |= {p.stem for p in ROOT.glob("*.py")}
    return top | {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module name -> the files (relative paths) that import it, for every module that is neither the
    standard library nor the project's own. Imports inside functions count: a lazy import is still a dependency."""
    found: dict[str, set[str]] = {}
    for path in source_files():
        ours = first_party(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top in sys.stdlib_module_names or top in ours or top == "__future__":
                    continue
                found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def unpinned_imports(pinned: set[str] | None = None) -> dict[str, str]:
    """Module -> why it is not covered, for every third-party import no pinned distribution provides."""
    pinned = pinned_distributions() if pinned is None else pinned
    providers = packages_distributions()
    problems = {}
    for module, files in sorted(third_party_imports().items()):
        distributions = {_normalized(name) for name in providers.get(module, [])}
        where = ", ".join(sorted(files)[:3]) + (" ..." if len(files) > 3 else "")
        if not distributions:
            problems[module] = f"no installed distribution provides it (imported by {where})"
        elif not distributions & pinned:
            problems[module] = f"from {', '.join(sorted(distributions))}, not pinned (imported by {where})"
    return problems


def test_every_imported_third_party_package_is_pinned():
    assert unpinned_imports() == {}


def test_every_requirement_is_pinned_to_one_version():
    loose = [f"{name}: {line}" for name, line in _requirement_lines() if not PIN.match(line)]
    assert loose == []


def test_the_check_sees_a_package_that_is_not_pinned():
    """The check itself can fail: a pinned import stops counting once its pin is gone."""
    assert "numpy" in third_party_imports()
    assert "numpy" in unpinned_imports(pinned_distributions() - {"numpy"})


if __name__ == "__main__":
    for module, problem in unpinned_imports().items():
        print(f"{module}: {problem}")
