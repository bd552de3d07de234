"""Build the wheel and the sdist, check what each archive holds, then install each into a fresh
virtualenv and check that the installed distribution shows its licence and metadata.

    python .ci/check_package.py

Exits non-zero with one line per problem.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "pytest_qstash"

#: What the sdist holds at its top level, and files that must be in it.
SDIST_TOP = {
    "pytest_qstash",
    "tests",
    "examples",
    "docs",
    "benchmarks",
    "README.md",
    "CHANGELOG.md",
    "LICENSE",
    "mkdocs.yml",
    "pyproject.toml",
    "PKG-INFO",
    ".gitignore",
}
SDIST_MUST = [
    "LICENSE",
    "README.md",
    "CHANGELOG.md",
    "pytest_qstash/py.typed",
    "tests/conftest.py",
    "examples/README.md",
    "examples/fastapi_app/tests/test_signup.py",
    "benchmarks/run.py",
    "docs/index.md",
]
#: Files besides the modules the wheel must ship (the dashboard's page works offline).
WHEEL_MUST = [
    "pytest_qstash/py.typed",
    "pytest_qstash/server/dashboard/static/dashboard.html",
    "pytest_qstash/server/dashboard/static/dashboard.js",
    "pytest_qstash/server/dashboard/static/dashboard.css",
]
#: Checked in the installed distribution's metadata, from the wheel and from the sdist alike.
METADATA_MUST = [
    "License-Expression: MIT",
    "License-File: LICENSE",
    "Requires-Python: >=3.10",
    "Classifier: Development Status :: 4 - Beta",
    "Classifier: Programming Language :: Python :: 3.10",
    "Classifier: Programming Language :: Python :: 3.13",
    "Classifier: Framework :: Pytest",
    "Project-URL: Repository, https://github.com/pytest-qstash/pytest-qstash",
    "Project-URL: Changelog, ",
    "Project-URL: Issues, ",
    "Project-URL: Documentation, ",
]

# Run inside the fresh virtualenv: what an installed copy tells about itself.
_INSPECT = f"""
import sys
from importlib.metadata import distribution, entry_points
dist = distribution("pytest-qstash")
licence = [f for f in dist.files if f.name == "LICENSE"]
assert licence, "no LICENSE among the installed files"
text = licence[0].read_text()
assert "MIT License" in text and "pytest-qstash developers" in text, "LICENSE text"
metadata = dist.read_text("METADATA") or ""
missing = [line for line in {METADATA_MUST!r} if line not in metadata]
assert not missing, f"metadata lacks {{missing}}"
plugins = [e.value for e in entry_points(group="pytest11")]
assert "pytest_qstash.plugin" in plugins, "no pytest11 entry point"
print("installed:", dist.metadata["Name"], dist.version, "with", licence[0])
"""


def main() -> int:
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dist"
        subprocess.run([sys.executable, "-m", "build", "-o", str(out), str(ROOT)], check=True)
        [wheel] = out.glob("*.whl")
        [sdist] = out.glob("*.tar.gz")

        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append(f"{wheel.name}: no dist-info/licenses/LICENSE")
        missing_files = [f for f in WHEEL_MUST if f not in names]
        if missing_files:
            problems.append(f"{wheel.name}: lacks {missing_files}")
        stray = sorted({n.split("/")[0] for n in names} - {NAME, *_dist_info(names)})
        if stray:
            problems.append(f"{wheel.name}: unexpected top-level entries {stray}")

        with tarfile.open(sdist) as archive:
            prefix = archive.getnames()[0].split("/")[0]
            files = {n.removeprefix(prefix + "/") for n in archive.getnames()}
        top = {f.split("/")[0] for f in files if f != prefix}
        if top - SDIST_TOP:
            problems.append(f"{sdist.name}: unexpected top-level entries {sorted(top - SDIST_TOP)}")
        missing = [f for f in SDIST_MUST if f not in files]
        if missing:
            problems.append(f"{sdist.name}: missing {missing}")
        if any("__pycache__" in f or f.endswith(".pyc") for f in files):
            problems.append(f"{sdist.name}: holds bytecode caches")

        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        for archive_path in (wheel, sdist):
            # --no-deps: the archive's own metadata is what is checked, quickly; --force-reinstall
            # puts the sdist's build in place of the wheel's.
            subprocess.run(
                [
                    python,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--force-reinstall",
                    str(archive_path),
                ],
                check=True,
            )
            result = subprocess.run(
                [python, "-c", _INSPECT], capture_output=True, text=True, check=False
            )
            print(result.stdout, end="")
            if result.returncode != 0:
                problems.append(f"installed from {archive_path.name}: {result.stderr.strip()}")

    for problem in problems:
        print(f"package check: {problem}", file=sys.stderr)
    if not problems:
        print("package check: wheel and sdist hold the licence, the metadata and their files")
    return 1 if problems else 0


def _dist_info(names: list[str]) -> set[str]:
    return {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}


if __name__ == "__main__":
    sys.exit(main())
