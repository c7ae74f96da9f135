"""The docs name the code as it is: every file they point at exists, and every
``file.py:Name.attr`` or ``test_file.py::test_name`` they cite is defined there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
REFERENCE = re.compile(
    r"((?:dblog_worker|spark|plugins|dags|bench|tests|scripts)/[\w/.-]*?\.py)"
    r"(?:(::|:)([A-Za-z_][\w.]*))?"
)


def _defined(source: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:class|def)\s+{re.escape(name)}\b"
                     rf"|^{re.escape(name)}\s*(?::[^=\n]*)?=", source, re.M) is not None


def _attribute(source: str, name: str) -> bool:
    return re.search(rf"\bdef\s+{re.escape(name)}\b|^\s+{re.escape(name)}\s*[:=]"
                     rf"|self\.{re.escape(name)}\b", source, re.M) is not None


def test_the_docs_point_at_code_that_exists() -> None:
    wrong = []
    for doc in DOCS:
        for match in REFERENCE.finditer(doc.read_text(encoding="utf-8")):
            path, _, name = match.groups()
            cited = f"{doc.relative_to(ROOT)}: {match.group(0)}"
            file = ROOT / path
            if not file.is_file():
                wrong.append(f"{cited}: no file {path}")
                continue
            if not name:
                continue
            source = file.read_text(encoding="utf-8")
            first, *attributes = name.split(".")
            if not _defined(source, first):
                wrong.append(f"{cited}: {first} is not defined in {path}")
            wrong += [f"{cited}: no {attribute} in {path}"
                      for attribute in attributes if not _attribute(source, attribute)]
    assert not wrong, "\n".join(wrong)
