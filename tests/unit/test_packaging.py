"""The package as it is installed: every module imports, every import is declared, the wheel is whole.

The editable install the tests run on hides what a wheel would miss (a migration, a console file),
and a virtual environment with extra packages in it hides an undeclared dependency. So: every
module of the product packages is imported in a fresh interpreter; every third-party package they
(and the tests) import must be named in pyproject.toml's dependencies (the tests': or in the
``test`` extra); ``pip check`` finds the installed versions within every declared range; and a
non-editable wheel, installed on its own into a new virtual environment, migrates an empty
database with its own ``toolrelay migrate`` and serves the console from its own files.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from receipts.db import Database
from receipts.schema.migrate import alembic_config
from tests.support import services, sql

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("receipts", "agents", "gateway", "workers", "webhooks", "toolrelay")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Alembic's env.py runs the migrations when it is imported; the migrations run for real below.
NOT_IMPORTED = ("receipts/schema/migrations/",)


def declared(*extras: str) -> set[str]:
    """The distributions pyproject.toml requires (with ``extras``), canonical names."""
    lines = list(PYPROJECT["project"]["dependencies"])
    for extra in extras:
        lines += PYPROJECT["project"]["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(line).name) for line in lines}


def source_files(package: str) -> Iterator[Path]:
    """The files of ``package`` in the source tree, caches aside."""
    for path in sorted((ROOT / package).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def top_level_imports(path: Path) -> set[str]:
    """The top-level names ``path`` imports at run time (``if TYPE_CHECKING:`` blocks aside)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def undeclared(folders: tuple[str, ...], allowed: set[str]) -> dict[str, list[str]]:
    """Third-party imports under ``folders`` whose distribution is not in ``allowed``: {module: [files]}."""
    own = set(PRODUCT) | {"tests"}
    distributions = importlib.metadata.packages_distributions()
    missing: dict[str, list[str]] = {}
    for folder in folders:
        for path in source_files(folder):
            if path.suffix != ".py":
                continue
            for name in top_level_imports(path) - own - set(sys.stdlib_module_names):
                providers = {canonicalize_name(d) for d in distributions.get(name, [])}
                if not providers & allowed:
                    missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return missing


def test_every_package_the_product_imports_is_a_declared_dependency() -> None:
    assert undeclared(PRODUCT, declared()) == {}


def test_every_package_the_tests_import_is_declared_for_them() -> None:
    assert undeclared(("tests",), declared("test")) == {}


def test_the_installed_packages_satisfy_every_declared_range() -> None:
    checked = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_module_of_the_product_packages_imports() -> None:
    expected = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in PRODUCT for path in source_files(package)
        if path.suffix == ".py" and path.name != "__main__.py"
        and not str(path.relative_to(ROOT)).startswith(NOT_IMPORTED))
    # A fresh interpreter: what this test process imported already would hide a broken import.
    script = f"""
import importlib, json, pkgutil
imported, failed = [], {{}}
for name in {list(PRODUCT)!r}:
    package = importlib.import_module(name)
    imported.append(name)
    for info in pkgutil.walk_packages(package.__path__, prefix=name + "."):
        if info.name.endswith(".__main__"):
            continue  # `python -m` entry points run when imported
        try:
            importlib.import_module(info.name)
            imported.append(info.name)
        except Exception as exc:
            failed[info.name] = repr(exc)
print(json.dumps({{"imported": imported, "failed": failed}}))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    assert sorted(result["imported"]) == expected  # pkgutil found every module, none is left out


def head_revision() -> str:
    """The latest migration of this checkout."""
    script = ScriptDirectory.from_config(alembic_config("postgresql+psycopg://unused/unused"))
    head = script.get_current_head()
    assert head is not None
    return head


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A non-editable wheel of this checkout, built as ``pip wheel`` builds it for a deployment."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out),
                            str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    [path] = out.glob("toolrelay-*.whl")
    return path


def test_the_wheel_carries_every_file_of_the_product_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    files = [str(path.relative_to(ROOT)) for package in PRODUCT for path in source_files(package)]
    assert [name for name in files if name not in names] == []
    assert "receipts/schema/migrations/versions/0001_initial_schema.py" in names
    assert "receipts/schema/migrations/script.py.mako" in names
    assert "gateway/console/static/index.html" in names
    assert not [name for name in names if name.startswith("tests/") or "__pycache__" in name]


@pytest.fixture
def empty_database() -> Iterator[str]:
    url = services.create_database(migrated=False)
    yield url
    services.drop_database(url)


def test_the_installed_wheel_migrates_a_database_and_serves_the_console(wheel: Path, tmp_path: Path,
                                                                        empty_database: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)
    # The product from the wheel; its dependencies from this environment (a path entry, whose own .pth
    # files, the editable install's among them, are not run).
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {**os.environ, "TOOLRELAY_DATABASE_URL": empty_database, "PYTHONDONTWRITEBYTECODE": "1"}

    migrated = subprocess.run([str(venv / "bin" / "toolrelay"), "migrate"], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
    assert migrated.returncode == 0, migrated.stderr
    assert "database is up to date" in migrated.stdout
    db = Database(empty_database, pool_size=1, name="toolrelay-test")
    try:
        assert sql.value(db, "SELECT version_num FROM alembic_version") == head_revision()
    finally:
        db.dispose()

    script = """
import receipts, json
from fastapi.testclient import TestClient
from gateway.app import create_app
from receipts.settings import load_settings
client = TestClient(create_app(load_settings()))
pages = {path: client.get(path) for path in ("/console/", "/console/js/app.js", "/console/console.css")}
summary = {path: [r.status_code, r.headers["content-type"], len(r.content)] for path, r in pages.items()}
print(json.dumps({"from": receipts.__file__, "pages": summary}))
"""
    served = subprocess.run([str(python), "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=300)
    assert served.returncode == 0, served.stderr
    result = json.loads(served.stdout.strip().splitlines()[-1])
    assert result["from"].startswith(str(site))  # the wheel's copy, not this checkout's
    for path, (status, content_type, size) in result["pages"].items():
        assert status == 200 and size > 0, path
        assert content_type.split(";")[0] in ("text/html", "text/javascript", "text/css"), path
