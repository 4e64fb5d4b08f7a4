"""Which label names which output: the equivalence of labels that a careful grader reads a long-form answer
by (long vs wide where labels name the outputs: grading/rules.py). Each label, as a key (NFKC, case-folded, blanks,
'_' and '-' alike), maps to canonical ids: its own text, the dictionary entries it is a code or a name of
(`1`/`男`/`male`; `ksdm`/`ksmc`/`ksmc_en`), and the period it writes (`2024-01`/`Jan 2024`/`2024年1月`).
Built from the eval DB's dictionary tables (a missing one means fewer aliases, never a failure) and
label_words.json, the English names of the zh words that code mappings use."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psycopg

from evalpkg.errors import QueryError
from evalpkg.grading.periods import holds_period, period_ids, period_words
from evalpkg.sql.executor import ReadOnlyExecutor

WORDS_FILE = Path(__file__).with_name("label_words.json")
DICTIONARY_QUERIES = {  # id prefix -> (code, zh name, en name): one id per row
    "dept": "select ksdm, ksmc, ksmc_en from emr.dict_dept",
    "lab": "select xmdm, xmmc, xmmc_en from emr.dict_lab_item",
    "drug": "select ypdm, ypmc, ypmc_en from emr.dict_drug",
}
CODE_MAPPING_QUERY = "select table_name, column_name, code_mapping from meta.data_dictionary where code_mapping <> ''"
_SEPARATORS = re.compile(r"[\s_\-]+")
# 'code=name' pairs: an ASCII code after a separator; the name ends at a blank, a separator or a
# parenthesis ('C=作废(结果无效…)' is 作废); '见 dict_dept.ksdm' and the like have no pair.
_CODE_PAIR = re.compile(r"(?:^|(?<=[\s;；,，]))([A-Za-z0-9_.+]+)=([^\s=;；,，(（]+)")
Fetch = Callable[[str], Sequence[Sequence[Any]]]


def label_key(text: str) -> str:
    """A label as compared: NFKC, case-folded, trimmed, and blanks, '_' and '-' as one space."""
    return _SEPARATORS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def label_text(value: Any) -> str | None:
    """A cell as a label (None: it names nothing, such as NULL, a boolean or a fractional number)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float | decimal.Decimal):
        try:
            return str(int(value)) if value == int(value) else None
        except (OverflowError, ValueError, decimal.InvalidOperation):  # NaN, infinities
            return None
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return None


def code_pairs(mapping: str) -> list[tuple[str, str]]:
    """The (code, name) pairs of a data dictionary code_mapping such as '0=未知 1=男 2=女 9=未说明 (GB/T…)'."""
    return _CODE_PAIR.findall(mapping)


def findable(key: str) -> bool:
    """Whether a key may be looked for inside a longer name: one ASCII letter or a short number would be
    found everywhere."""
    return len(key) >= (4 if key.isdigit() else 2 if key.isascii() else 1)


def contains(name: str, key: str, longer: Iterable[str] = ()) -> bool:
    """`key` inside `name` as a whole word where it is ASCII ('male' is not in 'female'; '1月' is not in
    '11月'), as a plain substring where it is zh ('男' in '男性患者数'), and not only as part of a longer
    known label there ('医嘱离院' is not in '非医嘱离院人次')."""
    start = name.find(key)
    while start >= 0:
        end = start + len(key)
        if (
            (start == 0 or not _word_char(name[start - 1]) or not _word_char(key[0]))
            and (end == len(name) or not _word_char(name[end]) or not _word_char(key[-1]))
            and not any(_covers(name, other, start, end) for other in longer)
        ):
            return True
        start = name.find(key, start + 1)
    return False


def _covers(name: str, other: str, start: int, end: int) -> bool:
    """Whether `other` occurs in `name` around [start, end)."""
    at = name.find(other, max(0, end - len(other)))
    return 0 <= at <= start


def _word_char(c: str) -> bool:
    return c.isascii() and c.isalnum()


@cache
def _words() -> dict[str, Any]:
    words: dict[str, Any] = json.loads(WORDS_FILE.read_text(encoding="utf-8"))
    return words


@cache
def _other_names() -> dict[str, list[str]]:
    return {zh: names for zh, names in _words().items() if not zh.startswith("_")}


@cache
def kind_words() -> dict[str, tuple[str, ...]]:
    """Dictionary id prefix ('dept') -> the label keys an output's name uses for the entry asked about."""
    groups: dict[str, list[str]] = _words()["_kinds"]
    return {kind: tuple(map(label_key, words)) for kind, words in groups.items()}


@cache
def relative_words() -> dict[str, tuple[str, ...]]:
    """'prev' and 'this' -> the label keys that say the previous or the current period (上月, last month)."""
    groups: dict[str, list[str]] = _words()["_relative"]
    return {name: tuple(dict.fromkeys(map(label_key, words))) for name, words in groups.items()}


class Labels:
    """label key -> canonical ids, and back (id -> keys, for finding a label inside a longer name)."""

    def __init__(self, groups: Iterable[tuple[str, Iterable[str | None]]]) -> None:
        index: dict[str, set[str]] = {}
        words: dict[str, set[str]] = {}
        other = _other_names()
        for ident, names in groups:
            for name in names:
                for alias in (name, *other.get(name, ())) if name else ():
                    if key := label_key(alias):
                        index.setdefault(key, set()).add(ident)
                        words.setdefault(ident, set()).add(key)
        self._ids = {key: frozenset(ids) for key, ids in index.items()}
        self._words = {ident: frozenset(keys) for ident, keys in words.items()}
        self._longer: dict[str, tuple[str, ...]] = {}  # key -> the known keys that contain it, on demand

    @classmethod
    def from_rows(
        cls,
        dictionary: Iterable[tuple[str, Sequence[str | None]]] = (),
        code_mappings: Iterable[Sequence[str | None]] = (),
    ) -> Labels:
        """dictionary: (id prefix, (code, zh name, en name)); code_mappings: (table, column, code_mapping)."""
        groups: list[tuple[str, Iterable[str | None]]] = [(f"word:{zh}", [zh]) for zh in _other_names()]
        groups += [(f"{prefix}:{row[0]}", row) for prefix, row in dictionary if row and row[0]]
        for table, column, mapping in code_mappings:
            for code, name in code_pairs(mapping or ""):
                groups.append((f"{table}.{column}={code}", [code, name, *name.split("/")]))
        return cls(groups)

    @classmethod
    def builtin(cls) -> Labels:
        """Periods and the word file only (no database)."""
        return cls.from_rows()

    @classmethod
    def from_connection(cls, conn: psycopg.Connection[Any]) -> Labels:
        """From the eval DB's dictionary tables, one query each, each in its own transaction so that a
        missing table (or a refused one) only means fewer aliases."""

        def fetch(sql: str) -> Sequence[Sequence[Any]]:
            try:
                with conn.transaction():
                    return conn.execute(sql).fetchall()
            except psycopg.Error:
                return []

        return cls._fetched(fetch)

    @classmethod
    def from_executor(cls, executor: ReadOnlyExecutor) -> Labels:
        """As from_connection, through the grader's executor (trusted queries, under its limits)."""

        def fetch(sql: str) -> Sequence[Sequence[Any]]:
            try:
                return executor.run(sql).rows
            except (QueryError, psycopg.Error):
                return []

        return cls._fetched(fetch)

    @classmethod
    def _fetched(cls, fetch: Fetch) -> Labels:
        dictionary = [(prefix, tuple(row)) for prefix, sql in DICTIONARY_QUERIES.items() for row in fetch(sql)]
        return cls.from_rows(dictionary, fetch(CODE_MAPPING_QUERY))

    def ids(self, text: str, year: str | None = None) -> frozenset[str]:
        """What the label means: its own text, dictionary entries, a period (one without a year in `year`);
        a label written as two or more names of one entry ('男 male', 'Cardiology (心血管内科)', '心血管内科
        (0101)') means that entry."""
        key = label_key(text)
        return (self._ids.get(key) or self._one_entry(key)) | period_ids(key, year) | {f"={key}"}

    def _one_entry(self, key: str) -> frozenset[str]:
        parts = [p for p in _PARTS.split(key) if p]
        if len(parts) < 2:
            return frozenset()
        return frozenset.intersection(*(self._ids.get(p, frozenset()) for p in parts))  # what every part means

    def aliases(self, ids: Iterable[str], year: str | None = None) -> set[str]:
        """Every key that writes one of these ids and may be found inside a longer name."""
        keys: set[str] = set()
        for ident in ids:
            if ident.startswith("="):
                keys.add(ident[1:])
            elif ident.startswith(("month:", "quarter:")):
                keys.update(period_words(ident, year))
            else:
                keys.update(self._words.get(ident, ()))
        return set(filter(findable, keys))

    def longer(self, key: str) -> tuple[str, ...]:
        """The known labels that contain this key (a dictionary scan, remembered)."""
        if key not in self._longer:
            self._longer[key] = tuple(k for k in self._ids if len(k) > len(key) and key in k)
        return self._longer[key]

    def targets(self, names: Sequence[Sequence[str]], year: str | None = None) -> Targets:
        """Things labels may name (gold columns, prediction columns), each known by `names[j]`."""
        groups = [[n for n in group if label_key(n)] for group in names]  # a blank name names nothing
        ids = [frozenset().union(*(self.ids(n, year) for n in group)) for group in groups]
        return Targets(self, year, ids, [[label_key(n) for n in group] for group in groups])


_ASCII_WORD = re.compile(r"[a-z0-9]+")
_PARTS = re.compile(r"[\s()（）\[\]/|,，:：]+")  # what separates the names in 'Cardiology (心血管内科)'


def _held_words(own: str, keys: Sequence[str]) -> int:
    """How many words the longest of these names has that the label holds: as one piece (contains), or,
    for an English name of two words or more and no number, word by word in any order with others between; a
    period only beside counted words (periods.holds_period)."""
    words = set(_ASCII_WORD.findall(own))
    best = 0
    for key in keys:
        if not findable(key):
            continue
        parts = _ASCII_WORD.findall(key) if key.isascii() else []
        in_any_order = len(parts) > 1 and not any(w[:1].isdigit() for w in parts)  # words, not a date
        if (contains(own, key) and holds_period(own, key)) or (in_any_order and set(parts) <= words):
            best = max(best, len(parts) or 1)
    return best


@dataclass(frozen=True)
class Targets:
    labels: Labels
    year: str | None
    ids: list[frozenset[str]]
    keys: list[list[str]]

    def named(self, text: str) -> set[int]:
        """The targets a label names: those it means exactly (a shared id) where there are any, else those
        whose names contain one of its aliases, or whose name it contains ('male patients' names 'male'),
        or the words of whose name (or of another name of it) it holds ('1 valid HbA1c result' names 'valid
        result'). Where the label holds the names of several, the most specific (the name of most words) is
        the one it names: '2 tested, no valid result' names 'tested no result', not 'valid result'."""
        ids = self.labels.ids(text, self.year)
        exact = {j for j, target in enumerate(self.ids) if not ids.isdisjoint(target)}
        if exact:
            return exact
        own = label_key(text)
        by_alias = self.containing(text, ids)
        held = {j: n for j, keys in enumerate(self.keys) if (n := _held_words(own, [*keys, *self._aliases(j)]))}
        if not held:
            return by_alias
        most = max(held.values())
        specific = {j for j, n in held.items() if n == most}
        return specific if most > 1 or not by_alias else by_alias | specific

    def _aliases(self, j: int) -> set[str]:
        """Every other way to write target j's names (a code's name, a word's English): a label that holds
        one of them holds the target ('2 impaired fasting glucose (6.1-6.9)' holds 'ifg')."""
        return self.labels.aliases(self.ids[j], self.year)

    def containing(self, text: str, ids: frozenset[str] | None = None) -> set[int]:
        """The targets whose names contain one of the label's aliases ('MZ' is in '上月门诊人次')."""
        aliases = self.labels.aliases(self.labels.ids(text, self.year) if ids is None else ids, self.year)
        return {
            j
            for j, keys in enumerate(self.keys)
            if any(contains(k, a, self.labels.longer(a)) and holds_period(k, a) for k in keys for a in aliases)
        }
