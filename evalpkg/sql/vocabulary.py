"""Words the graders, the classifier, the clusterer, the audit and the refresh share, defined once: which
columns of the eval schema are event times (a question's time trap picks between them), the raw values that
are days, months or periods and the names that say a time, and which output names say rate or share. How a
period label is read in its many forms is grading/periods.py's."""

from __future__ import annotations

import re

# Every timestamp of the eval schema's tables an analyst may count by (the data dictionary gives each a
# time meaning); update_time is the sync's bookkeeping, not an event.
TIME_COLUMNS = frozenset({"jdrq", "ghrq", "ryrq", "cyrq", "zdsj", "cysj", "exec_time", "report_time", "kssj", "jssj"})

# Raw values (before label_key): a month 'YYYY-MM' (the refresh's --month), a day 'YYYY-MM-DD', a date or
# midnight on the 1st (a month as date_trunc writes it), a quarter's first month, and any text that starts
# as a date or a period ('2024', '2024-03-05 ...', '2024-Q1'): a time value, never a name.
MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
DAY = re.compile(r"(\d{4})-(\d\d)-(\d\d)")
DATE_TEXT = re.compile(r"\d{4}-\d{2}(-\d{2})?([ T][\d:.]+)?")  # a month or a day, with a time of it
FIRST_OF_MONTH = re.compile(MONTH.pattern + r"-01(?:[ T]00:00(?::00(?:\.0+)?)?(?:Z|[+-]\d\d(?::?\d\d)?)?)?")
QUARTER_START = re.compile(r"(\d{4})-(01|04|07|10)")
TIME_VALUE = re.compile(r"(19|20)\d\d(-\d\d)?(-\d\d)?( |T|$)|(19|20)\d\d-?Q\d")

# Column names: a calendar period names a grouping (a year, quarter or month column); a time key adds the
# finer and vaguer words (an audit keeps it out of the measures); a time column adds the dictionary's own
# date suffixes (ryrq: admission date, zdsj: diagnosis time), read by the tie rules.
_CALENDAR_WORDS = "year|quarter|month|年|季|月"
CALENDAR_NAME = re.compile(_CALENDAR_WORDS, re.IGNORECASE)
TIME_KEY_NAME = re.compile(_CALENDAR_WORDS + "|week|day|date|period", re.IGNORECASE)
TIME_NAME = re.compile(TIME_KEY_NAME.pattern + "|time|rq$|sj$", re.IGNORECASE)

# "recent N months" and its kin in a request (zh and en), and an absolute period stated in it (a year or a month).
RELATIVE_WORDS = re.compile(
    r"(最近|近|过去)(半|一|两|三|[0-9]+)?个?(年|月|周|天)|最近|(recent|last|past)\s+\w*\s*(days?|weeks?|months?|years?)",
    re.I,
)
ABSOLUTE_PERIOD = re.compile(r"[0-9]{4}\s*年|[0-9]{4}-[0-9]{2}|(19|20)[0-9]{2}\b")

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
