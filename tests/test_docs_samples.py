"""Every ```python sample of the documentation (docs/*.md, README.md) runs as a test.

Each sample becomes a test module of its own in an inner pytest session (pytester, with the
plugin loaded as for a user), whose conftest provides the project a sample stands in
(``docs_sample_env.py``: ``app``, ``client``, ``outbox``, ...):

- a sample defining tests runs as it is; one defining only fixtures gets a test requesting
  them (and ``qstash``), so the fixtures run too;
- a sample of statements becomes the body of a test taking ``qstash`` (async when it awaits).

An HTML comment right before a sample's fence, invisible on the rendered page, may say:

- ``<!-- setup: CODE -->``: code run first, in the same scope (the state a sample assumes);
- ``<!-- not-run: WHY -->``: the sample is not run (a fragment that cannot stand alone);
- ``<!-- file: NAME.py -->``: the sample is a file of the reader's project (``app.py``): it is
  written beside every later sample of the same page, which may import it, and its own test
  only imports it.

A sample that defines a ``test_`` function at top level runs as the whole module it is (app,
routes and tests together, as a how-to guide shows them).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from ci_requirements import BY_DESIGN
from inner_pytest import run_inner

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
ENV = Path(__file__).with_name("docs_sample_env.py")

_FENCE = re.compile(
    r"(?:<!--\s*(?P<kind>setup|not-run|file):(?P<comment>.*?)-->\s*\n)?"
    r"^```python\n(?P<code>.*?)^```$",
    re.DOTALL | re.MULTILINE,
)


@dataclass(frozen=True)
class Sample:
    page: Path
    line: int
    code: str
    setup: str = ""
    not_run: str = ""
    #: The file name a ``file:`` sample is written as (``app.py``).
    file: str = ""

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def samples(page: Path) -> list[Sample]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start("code"))  # the fence's own line, 1-based
        comment = textwrap.dedent(match["comment"] or "").strip("\n")
        found.append(
            Sample(
                page,
                line,
                match["code"],
                setup=comment if match["kind"] == "setup" else "",
                not_run=comment.strip() if match["kind"] == "not-run" else "",
                file=comment.strip() if match["kind"] == "file" else "",
            )
        )
    return found


ALL = [sample for page in PAGES for sample in samples(page)]


def as_test_module(sample: Sample) -> str:
    """The sample as a test module (see the module docstring)."""
    header = f"# {sample.name}\nfrom docs_sample_env import *\n\n"
    tree = ast.parse(sample.code)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    defines = [node for node in tree.body if isinstance(node, functions)]
    if sample.file:
        module = Path(sample.file).stem
        return f"{header}import {module}\n\n\ndef test_sample_imports():\n    pass\n"
    runs_as_module = any(node.name.startswith("test_") for node in defines)
    if defines and (
        runs_as_module
        or all(isinstance(node, (*functions, ast.Import, ast.ImportFrom)) for node in tree.body)
    ):
        module = f"{header}{sample.setup}\n{sample.code}"
        if not any(node.name.startswith("test_") for node in defines):
            fixtures = ", ".join(["qstash", *(node.name for node in defines)])
            module += f"\n\ndef test_sample_fixtures({fixtures}):\n    pass\n"
        return module
    body = textwrap.indent(f"{sample.setup}\n{sample.code}", "    ")
    is_async = "await " in sample.code or "async with" in sample.code
    signature = "async def test_sample(qstash):" if is_async else "def test_sample(qstash):"
    return f"{header}{signature}\n{body}\n"


def test_the_docs_have_samples() -> None:
    assert len([s for s in ALL if not s.not_run]) >= 15


@pytest.mark.parametrize("sample", ALL, ids=[s.name for s in ALL])
def test_sample_runs(pytester: pytest.Pytester, sample: Sample) -> None:
    if sample.not_run:
        pytest.skip(f"{BY_DESIGN.sample_not_run}: {sample.not_run}")
    pytester.makeconftest("from docs_sample_env import *\n")
    pytester.makepyfile(docs_sample_env=ENV.read_text(encoding="utf-8"))
    for earlier in ALL:
        if earlier.page == sample.page and earlier.file and earlier.line <= sample.line:
            pytester.makepyfile(**{Path(earlier.file).stem: earlier.code})
    pytester.makepyfile(test_sample=as_test_module(sample))
    result = run_inner(pytester, "-o", "asyncio_mode=auto", "-W", "error::pytest.PytestWarning")
    outcomes = result.parseoutcomes()
    passed = outcomes.get("passed", 0) >= 1 and not outcomes.keys() - {"passed"}
    assert passed, f"the sample at {sample.name} did not pass as a test:\n{result.stdout.str()}"
