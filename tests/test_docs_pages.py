"""The documentation's shape: every page short enough to read, and the reference complete
where the code can say what it must hold."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from ci_requirements import BY_DESIGN

from pytest_qstash.plugin import MARKER_OPTIONS
from pytest_qstash.server import cli

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: Pages made by a tool rather than written (the API reference is mkdocstrings').
GENERATED = {"reference.md", "changelog.md"}
LONGEST_PAGE = 400


@pytest.mark.parametrize(
    "page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")), ids=str
)
def test_no_page_is_longer_than_a_reader_reads(page: str) -> None:
    if page in GENERATED:
        pytest.skip(BY_DESIGN.docs_generated)
    lines = (DOCS / page).read_text(encoding="utf-8").count("\n")
    assert lines <= LONGEST_PAGE, f"docs/{page} has {lines} lines: split it by subject"


def _serve_flags() -> list[str]:
    root = cli.parser()
    [commands] = [a for a in root._actions if isinstance(a, argparse._SubParsersAction)]
    serve = commands.choices["serve"]
    return sorted(
        option
        for action in serve._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    )


def test_every_serve_flag_is_in_the_options_table() -> None:
    text = (DOCS / "server.md").read_text(encoding="utf-8")
    table = text[text.index("## Options") : text.index("\n## ", text.index("## Options") + 1)]
    missing = [flag for flag in _serve_flags() if f"`{flag}" not in table]
    assert not missing, f"docs/server.md's options table lacks {missing}"


def test_every_marker_keyword_is_in_the_marker_table() -> None:
    text = (DOCS / "usage.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.MULTILINE))
    missing = sorted(set(MARKER_OPTIONS) - rows)
    assert not missing, f"docs/usage.md's marker table lacks {missing}"
