"""Period labels as canonical ids: a month is 'month:YYYY-MM' however it is written ('2024-01', 'Jan 2024',
'2024年1月', '2024-01-01'), a quarter 'quarter:YYYY-Qn'. A label without its year ('1', '1月', 'jan', 'Q1')
is 'month:*-01' unless the caller knows the one year every label of the set lies in.

Texts arrive as label keys (evalpkg.grading.labels.label_key): NFKC, case-folded, runs of blanks, '_' and
'-' as one space.

The forms a period label is read in are defined here, once; the raw values that are days, months or
periods and the words that make a column name a time are sql/vocabulary.py's, beside the time columns."""

from __future__ import annotations

import re
from collections.abc import Iterable

MONTH_NAMES: tuple[str, ...] = ("january", "february", "march", "april", "may", "june")
MONTH_NAMES += ("july", "august", "september", "october", "november", "december")
_MONTH_OF = {name: i for i, name in enumerate(MONTH_NAMES, 1)} | {n[:3]: i for i, n in enumerate(MONTH_NAMES, 1)}
_MONTH_OF["sept"] = 9
_ZH_DIGIT = {"一": 1, "二": 2, "三": 3, "四": 4}
_YEAR = r"((?:19|20)\d\d)"
_FULL_MONTH = [  # (pattern, group of the year, group of the month)
    (re.compile(_YEAR + r"[ /.](\d\d?)"), 1, 2),
    (re.compile(_YEAR + r" (\d\d) 01(?:[ t]00:00(?::00(?:\.0+)?)?(?:z|[+ ]\d\d(?::?\d\d)?)?)?"), 1, 2),
    (re.compile(_YEAR + r"年(\d\d?)月份?"), 1, 2),
    (re.compile(r"([a-z]+)\.? ?" + _YEAR), 2, 1),
    (re.compile(_YEAR + r" ?([a-z]+)"), 1, 2),
]
_BARE_MONTH = [
    re.compile(r"(\d\d?)"),
    re.compile(r"(\d\d?)月份?"),
    re.compile(r"([a-z]+)\.?"),
    re.compile(r"month ?(\d\d?)"),
]
_FULL_QUARTER = [
    (re.compile(_YEAR + r" ?q([1-4])"), 1, 2),
    (re.compile(r"q([1-4]) ?" + _YEAR), 2, 1),
    (re.compile(_YEAR + r"年第?([1-4一二三四])季度?"), 1, 2),
    (re.compile(_YEAR + r"年q([1-4])"), 1, 2),
]
_YEAR_RANGE = re.compile(_YEAR + r"年?度? ?(?:[–—~～至到]|to)? ?" + _YEAR + r"年?度?")
_BARE_QUARTER = [re.compile(r"q([1-4])"), re.compile(r"第?([1-4一二三四])季度"), re.compile(r"quarter ?([1-4])")]


def _month(text: str) -> int | None:
    number = int(text) if text.isdigit() else _MONTH_OF.get(text)
    return number if number is not None and 1 <= number <= 12 else None


def _quarter(text: str) -> int:
    return _ZH_DIGIT.get(text) or int(text)


def period_ids(key: str, year: str | None = None) -> set[str]:
    """The periods a label key names (none, or one); a label without a year takes `year` where given."""
    if not key or len(key) > 24 or not (key.isascii() or "季" in key or any(c.isdigit() for c in key)):
        return set()  # most labels are no period: zh words without a digit, long names
    for pattern, y, m in _FULL_MONTH:
        if (match := pattern.fullmatch(key)) and (month := _month(match[m])):
            return {f"month:{match[y]}-{month:02d}"}
    for pattern, y, q in _FULL_QUARTER:
        if match := pattern.fullmatch(key):
            return {f"quarter:{match[y]}-Q{_quarter(match[q])}"}
    for pattern in _BARE_MONTH:
        if (match := pattern.fullmatch(key)) and (month := _month(match[1])):
            return {f"month:{year or '*'}-{month:02d}"}
    for pattern in _BARE_QUARTER:
        if match := pattern.fullmatch(key):
            return {f"quarter:{year or '*'}-Q{_quarter(match[1])}"}
    return set()


def year_range(key: str) -> tuple[int, int] | None:
    """(first, last) year of a label key naming a run of whole years ('2018 2020' from '2018-2020', '2018–2020',
    '2018至2020', '2018年 2020年', '2018 to 2020'), the last after the first; None for anything else."""
    match = _YEAR_RANGE.fullmatch(key)
    if not match or int(match[1]) >= int(match[2]):
        return None
    return int(match[1]), int(match[2])


def counted_words(words: Iterable[str]) -> bool:
    """Words beside a period that can only say what was counted ('admissions', '门诊量'): no number ('28' beside
    the month of the day '2018 01 28', '28日', 'n=5') and no period of their own ('nov' in 'nov vs dec 2024')."""
    return not any(c.isdigit() for w in words for c in w) and not any(period_ids(w) for w in words)


def holds_period(name: str, key: str) -> bool:
    """Whether a name that contains `key` holds it as written: any key that is no period, and a period only
    beside counted words ('visits 2024 01', '2024年1月门诊量'), so a day holds no month ('2018 02 02' is not
    '2018 02')."""
    return not period_ids(key) or counted_words(name.replace(key, " ", 1).split())


def one_year(keys: Iterable[str]) -> str | None:
    """The year every dated period among these label keys lies in, where there is exactly one."""
    years = {i.split(":")[1][:4] for key in keys for i in period_ids(key) if not i.split(":")[1].startswith("*")}
    return years.pop() if len(years) == 1 else None


def period_words(period_id: str, year: str | None = None) -> list[str]:
    """Ways to write the period, as label keys, for finding it inside a longer name ('visits 2024 01',
    '2024年1月门诊量'); the forms without the year only where the set's one year is this period's."""
    kind, _, when = period_id.partition(":")
    y, _, part = when.partition("-")
    bare = y == "*" or y == year
    if kind == "month":
        m = int(part)
        name = MONTH_NAMES[m - 1]
        words = [f"{m}月", f"{m:02d}月", name, name[:3]] if bare else []
        return words if y == "*" else [*words, f"{y} {part}", f"{y}年{m}月", f"{y}年{part}月", f"{name} {y}"]
    if kind == "quarter":
        n = part[1:]
        words = [f"q{n}", f"第{n}季度"] if bare else []
        return words if y == "*" else [*words, f"{y} q{n}", f"{y}q{n}", f"q{n} {y}", f"{y}年第{n}季度"]
    return []
