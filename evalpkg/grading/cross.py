"""Cross pivot: a prediction whose row label and column header together name a gold column. The
gold `mz_prev, mz_this, zy_prev, zy_this` answered as rows MZ and ZY under the headers `prev_month_visits`,
`this_month_visits`: the label MZ is in the names of mz_prev and mz_this (门诊 = outpatient), and of those
the header's word prev (previous, 上月, last) is in mz_prev's alone. Two consecutive periods as labels read
as the previous and the current one where the gold's names speak of them (上月/本月, prev/this).

A cell (label, header) names the one gold column, among those its label names, whose names hold the most
of the header's informative words (those in some of these columns' names but not in all; a rate header
names only a rate); a header whose informative words tie between two names both: ambiguous, no pivot. Every
gold column must be named by exactly one cell (or left to the prediction's key columns); a label that names
nothing must be a summary row whose numbers are the sums (TOTAL), else it is an extra row: no pivot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalpkg.grading.labels import Labels, contains, findable, kind_words, label_key, label_text, relative_words
from evalpkg.grading.periods import counted_words, one_year, period_ids
from evalpkg.grading.summary import is_total_label, without_summary_rows
from evalpkg.sql.vocabulary import RATE, is_rate_header

Rows = Sequence[Sequence[Any]]
_MISSING = object()
_RELATIVE = "@"  # a term that is a relative period: '@prev', '@this'


def crossed(
    rows: Rows,
    label_col: int,
    texts: list[str],
    value_cols: list[int],
    key_cols: list[int],
    headers: Sequence[str],
    names: list[list[str]],
    labels: Labels,
) -> tuple[list[list[Any]], dict[int, int]] | None:
    """(the prediction as one wide row per key: its key columns, then one column per gold column a cell
    names; gold column -> its column there), or None where the cells do not name the gold's columns.
    texts: the label column's distinct labels; value_cols: its numeric columns; names[j]: gold column j's
    name and other names; headers: the prediction's column names."""
    keys = [[label_key(n) for n in group if label_key(n)] for group in names]
    named = _label_targets(texts, keys, labels)
    if named is None:
        return None
    kept = _without_unnamed(rows, label_col, set(named))
    if kept is None:
        return None
    gold_of = _cells(named, [headers[c] for c in value_cols], keys)
    if gold_of is None or len(set(gold_of.values())) + len(key_cols) < len(names):
        return None
    outputs = sorted(set(gold_of.values()))
    slot_of = {(text, value_cols[h]): outputs.index(j) for (text, h), j in gold_of.items()}
    wide = _widened(kept, label_col, key_cols, slot_of, len(outputs))
    if wide is None:
        return None
    return wide, {j: len(key_cols) + slot for slot, j in enumerate(outputs)}


def _label_targets(texts: list[str], keys: list[list[str]], labels: Labels) -> dict[str, set[int]] | None:
    """Label -> the gold columns whose names contain one of its aliases, or that speak of the period it is
    (previous or this); labels that name nothing left out, and None where one of them is no total."""
    year = one_year(map(label_key, [*texts, *(k for group in keys for k in group)]))
    targets = labels.targets(keys, year)
    relative = _relative_labels(texts, year)
    named: dict[str, set[int]] = {}
    for text in texts:
        found = (
            targets.containing(text)
            or _speaking_of(relative.get(text), keys)
            or _by_telling_word(text, keys)
            or _by_kind(text, keys, labels, year)
        )
        if found:
            named[text] = found
        elif not is_total_label(text):
            return None  # an extra row: a scope the gold does not have
    return named if len(named) >= 2 else None


def _relative_labels(texts: list[str], year: str | None) -> dict[str, str]:
    """Label -> 'prev' or 'this': a word for the previous or current period, or, where two of the labels
    are periods and consecutive, the earlier one and the later one."""
    words = relative_words()
    found = {text: name for text in texts for name, group in words.items() if label_key(text) in group}
    periods = [text for text in texts if period_index(text, year) is not None]
    if len(periods) == 2:
        first, second = (period_index(text, year) for text in periods)
        if first is not None and second is not None and abs(first - second) == 1:
            earlier, later = periods if first < second else periods[::-1]
            found |= {earlier: "prev", later: "this"}
    return found


def period_index(text: str, year: str | None) -> int | None:
    """A month or a quarter with its year as a number that the next one follows by 1 (kinds apart): the
    label's period, or the one period a longer label names among other words ('admissions_nov_2024')."""
    ids = _period_within(label_key(text), year)
    if len(ids) != 1:
        return None
    kind, _, when = ids.pop().partition(":")
    y, _, part = when.partition("-")
    if not y.isdigit():
        return None
    if kind == "month":
        return 12 * int(y) + int(part) - 1
    return 10**6 + 4 * int(y) + int(part[1:]) - 1  # a quarter is never next to a month


def _period_within(key: str, year: str | None) -> set[str]:
    """The periods a label key names, whole or in its longest run of words that names one where the other
    words say what was counted ('admissions nov 2024'), not a finer date ('2018 01 28' is a day, no month)
    or another period ('nov vs dec 2024'); none where runs that long name two."""
    words = key.split()
    for n in range(len(words), 0, -1):
        found = {
            i
            for start in range(len(words) - n + 1)
            if counted_words(words[:start] + words[start + n :])
            for i in period_ids(" ".join(words[start : start + n]), year)
        }
        if found:
            return found if len(found) == 1 else set()
    return set()


def _by_telling_word(text: str, keys: list[list[str]]) -> set[int]:
    """The gold columns whose name holds a word of the label that tells columns apart ('Hospital-wide' and
    hospital_prev, hospital_this beside dept_prev, dept_this): one some, not all, column names hold."""
    names = [set(group[0].split()) if group else set() for group in keys]
    telling = {w for w in set().union(*names) if 0 < sum(w in n for n in names) < len(names)}
    words = set(label_key(text).split()) & telling
    return {j for j, n in enumerate(names) if n & words}


def _by_kind(text: str, keys: list[list[str]], labels: Labels, year: str | None) -> set[int]:
    """Where the label is one dictionary entry (a department: 'Cardiology'), the gold columns whose name says
    that kind of entry ('dept_prev': the department's, as the question names it)."""
    kinds = {i.partition(":")[0] for i in labels.ids(text, year)} & set(kind_words())
    if len(kinds) != 1:
        return set()
    words = kind_words()[kinds.pop()]
    return {j for j, group in enumerate(keys) if group and set(group[0].split()) & set(words)}


def _speaking_of(relative: str | None, keys: list[list[str]]) -> set[int]:
    """The gold columns whose names speak of this relative period and not of the other one."""
    if relative is None:
        return set()
    words = relative_words()
    other = [w for name, group in words.items() if name != relative for w in group]
    return {j for j, group in enumerate(keys) if _found(words[relative], group) and not _found(other, group)}


def _without_unnamed(rows: Rows, label_col: int, named: set[str]) -> Rows | None:
    """The rows whose label names gold columns, where the others are summary rows (their numbers the sums)."""
    labelled = [r for r in rows if (t := label_text(r[label_col])) is not None and t in named]
    if len(labelled) == len(rows):
        return rows
    detailed = without_summary_rows(rows)
    if detailed is None or len(detailed) != len(labelled):
        return None
    return detailed if all(label_text(r[label_col]) in named for r in detailed) else None


def _cells(named: dict[str, set[int]], headers: list[str], keys: list[list[str]]) -> dict[tuple[str, int], int] | None:
    """(label, header position) -> the gold column that cell names; None where a cell is ambiguous, a gold
    column is named twice, or fewer than two cells name one."""
    terms = [_terms(h) for h in headers]
    if len(terms) > 1:  # words every header has say nothing of which one is which
        common = set.intersection(*terms)
        terms = [t - common for t in terms]
    relative = _relative_labels(headers, None)  # two consecutive periods as headers: 'nov_2024', 'dec_2024'
    terms = [t | ({_RELATIVE + relative[h]} if h in relative else set()) for t, h in zip(terms, headers, strict=True)]
    rates = [is_rate_header(label_key(h)) for h in headers]
    is_rate = [any(RATE.search(k) for k in group) for group in keys]
    everything = set().union(*named.values())
    gold_of: dict[tuple[str, int], int] = {}
    strength: dict[tuple[str, int], int] = {}  # how many telling words of its column a cell's header holds
    outdone: set[int] = set()  # headers of this label whose column a header holding more of its words took
    for text, among in named.items():
        scope = among if len(among) > 1 else everything
        for h, words in enumerate(terms):
            found = {t: {j for j in scope if _term_found(t, keys[j])} for t in words}
            telling = [t for t, js in found.items() if 0 < len(js) < len(scope)]
            score = {j: sum(j in found[t] for t in telling) for j in among if is_rate[j] == rates[h]}
            best = max(score.values(), default=0)
            if best == 0:
                continue  # the header names none of them: an extra column
            winners = [j for j, s in score.items() if s == best]
            if len(winners) > 1:
                return None
            rival = next(((k, g) for (t, k), g in gold_of.items() if t == text and g == winners[0]), None)
            if rival is not None:  # two headers name one column: the one holding more of its words names it
                if strength[text, rival[0]] == best:
                    return None
                if strength[text, rival[0]] > best:
                    outdone.add(h)
                    continue
                del gold_of[text, rival[0]]
                outdone.add(rival[0])
            gold_of[text, h] = winners[0]
            strength[text, h] = best
        taken = {j for (t, _), j in gold_of.items() if t == text}
        if len(left := [j for j in among if j not in taken]) == 1:
            # The label's last fact takes the one header of its kind left: where the label alone names it
            # ('2022-03' is zy_prev where the gold compares two months), any header; else one that spoke of
            # the label's facts but was outdone ('wbc_results' beside 'abnormal_results' is the tests).
            candidates = range(len(headers)) if len(among) == 1 else outdone
            kind = [h for h in candidates if rates[h] == is_rate[left[0]] and (text, h) not in gold_of]
            if len(kind) == 1:
                gold_of[text, kind[0]] = left[0]
        outdone.clear()
    if len(gold_of) < 2 or len(set(gold_of.values())) < len(gold_of):
        return None
    return gold_of


def _terms(header: str) -> set[str]:
    """A header's findable words, a word of the previous or current period as '@prev' or '@this' (also
    found inside a zh header: 上月门诊人次)."""
    key = label_key(header)
    words = relative_words()
    terms = {w for w in key.split(" ") if findable(w)}
    relative = {_RELATIVE + name for name, group in words.items() if any(contains(key, w) for w in group)}
    return {w for w in terms if not any(w in group for group in words.values())} | relative


def _term_found(term: str, group: list[str]) -> bool:
    if term.startswith(_RELATIVE):
        return _found(relative_words()[term[1:]], group)
    return _found([term], group)


def _found(words: Sequence[str], group: list[str]) -> bool:
    return any(contains(k, w) for k in group for w in words)


def _widened(
    rows: Rows, label_col: int, key_cols: list[int], slot_of: dict[tuple[str, int], int], width: int
) -> list[list[Any]] | None:
    """One row per key: its values, then per slot the cell of that slot (NULL where no row has it); None
    where a key has two rows under one label."""
    by_label: dict[str, list[tuple[int, int]]] = {}
    for (named, col), slot in slot_of.items():
        by_label.setdefault(named, []).append((col, slot))
    lines: dict[tuple[Any, ...], list[Any]] = {}
    seen: set[tuple[tuple[Any, ...], str]] = set()
    try:
        for row in rows:
            text = label_text(row[label_col])
            if text is None or text not in by_label:
                continue
            key = tuple(row[k] for k in key_cols)
            if (key, text) in seen:
                return None
            seen.add((key, text))
            line = lines.setdefault(key, [_MISSING] * width)
            for col, slot in by_label[text]:
                line[slot] = row[col]
    except TypeError:  # a JSON array or object in a key column
        return None
    return [[*key, *(None if cell is _MISSING else cell for cell in line)] for key, line in lines.items()]
