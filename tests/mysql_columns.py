"""Test helpers about MySQL column descriptors."""

from __future__ import annotations

import re
from dataclasses import replace

from dblog_worker.mysql.column_model import MyColumn

_OUTSIDE_BMP = re.compile("[\U00010000-\U0010ffff]")


def same_column(from_information_schema: MyColumn, from_binlog: MyColumn) -> bool:
    """Whether two descriptors describe the same column: equal, except that
    ``information_schema`` (utf8mb3) shows each ENUM/SET member character outside the BMP
    as ``?``."""
    shown = tuple(_OUTSIDE_BMP.sub("?", member) for member in from_binlog.members)
    return from_information_schema == replace(from_binlog, members=shown)
