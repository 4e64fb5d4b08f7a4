"""Words the graders, the classifier and the clusterer share, defined once: which columns of the eval schema
are event times (a question's time trap picks between them), and which output names say rate or share."""

from __future__ import annotations

import re

# Every timestamp of the eval schema's tables an analyst may count by (the data dictionary gives each a
# time meaning); update_time is the sync's bookkeeping, not an event.
TIME_COLUMNS = frozenset({"jdrq", "ghrq", "ryrq", "cyrq", "zdsj", "cysj", "exec_time", "report_time", "kssj", "jssj"})

# A rate, ratio or share, named in English or Chinese: an English word must stand as a word of its own
# in a snake_case or spaced name (visit_rate, pct_female, "share of"), so moderate_cases is no rate. A bare
# '%' is not in it: an output's meaning may name a threshold ("above 7%") of a count.
RATE = re.compile(
    r"(?<![a-z])(?:rate|ratio|percent|pct|proportion|fraction|share)(?:s|age|ages)?(?![a-z])|率|比例|占比|百分",
    re.IGNORECASE,
)


def is_rate_header(header: str) -> bool:
    """A column header that names a rate: its words, or a percent sign ('share %', '%')."""
    return bool(RATE.search(header)) or "%" in header
