"""How each gold reads the dictionary's rules, and the audit of every alternative gold (from v11 on).

A task may carry several golds: each a reading a careful analyst defends from the question and the dictionary.
Four rules of the dictionary are read here from a gold's SQL: report status (a voided report, bgzt C, is
excluded), voided orders (zfbz 1 is excluded), a glucose cut-off (converted from mg/dL, or the mg/dL cut-off
clinicians write) and an age (at the snapshot, nlfz; or at the event, its year - csnf). A gold that counts voided
reports or orders contradicts the dictionary and is never a gold. An alternative that reads a cut-off or an age
otherwise than its task's first gold is one only with the reason recorded for its template in
testset/readings.json, and a recorded reason no task uses any more is stale: both are validate's problems.
`evalpkg testset readings vN` prints the audit as a table."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from evalpkg.sql import fingerprint
from evalpkg.testset.models import Task
from evalpkg.testset.traps import required

READINGS_FROM: Final = "v11"  # releases before stay as they were cut
RECORDED_PATH: Final = Path(__file__).with_name("readings.json")

REPORT_STATUS, VOIDED_ORDERS, CUT_OFF, AGE = "report status", "voided orders", "cut-off", "age"
AUDITED: Final = (CUT_OFF, AGE)  # an alternative may differ here with a recorded reason
NEVER_A_GOLD: Final = {REPORT_STATUS: "voided reports counted", VOIDED_ORDERS: "voided orders counted"}

_FINAL_REPORTS = re.compile(r"bgzt\s*(=\s*'f'|<>\s*'c'|!=\s*'c'|is\s+distinct\s+from\s+'c'|in\s*\(\s*'f'\s*\))")
_VOIDED_ASKED = re.compile(r"bgzt\s*=\s*'c'")
_ORDERS_KEPT = re.compile(r"zfbz\s*(,\s*0\s*\)\s*)?(=\s*0|<>\s*1|!=\s*1|is\s+distinct\s+from\s+1)")
_CONVERTED = re.compile(r"[/*]\s*18(\.0*)?\b")
_MGDL_CUT_OFF = re.compile(r"unit\s*=\s*'mg/dl'\s+and\s+\w*\.?result_value\s*[<>]=?\s*\d")
_AGE_AT_EVENT = re.compile(r"extract\s*\(\s*year\s+from[^)]*\)\s*(::\s*int\s*)?-\s*(\w+\.)?csnf")
_AGE_AT_SNAPSHOT = re.compile(r"\bnlfz\b|pinned_date[^,]*-\s*(\w+\.)?csnf")


def reading(sql: str) -> dict[str, str]:
    """The gold's reading of each rule it touches."""
    text = re.sub(r"\s+", " ", sql.lower())
    found: dict[str, str] = {}
    if "t_lab_result" in text:
        found[REPORT_STATUS] = (
            "final reports"
            if _FINAL_REPORTS.search(text)
            else "voided reports asked"
            if _VOIDED_ASKED.search(text)
            else NEVER_A_GOLD[REPORT_STATUS]
        )
    if "t_med_order" in text:
        found[VOIDED_ORDERS] = "voided orders excluded" if _ORDERS_KEPT.search(text) else NEVER_A_GOLD[VOIDED_ORDERS]
    if _CONVERTED.search(text) or _MGDL_CUT_OFF.search(text):
        found[CUT_OFF] = "mg/dL cut-off" if _MGDL_CUT_OFF.search(text) else "converted to mmol/L"
    ages = [
        name for name, rx in (("at the event", _AGE_AT_EVENT), ("at the snapshot", _AGE_AT_SNAPSHOT)) if rx.search(text)
    ]
    if ages:
        found[AGE] = " and ".join(ages)
    return found


@dataclass(frozen=True)
class Alternative:
    """One gold beyond a graded turn's first, and how it reads the rules otherwise."""

    task: str
    template: str
    turn: int
    gold: int
    differs: dict[str, tuple[str, str]]  # rule -> (the first gold's reading, this one's)


def held(version: str) -> bool:
    """Whether a release is held to the audit (releases before READINGS_FROM stay as they were cut)."""
    return required(version, READINGS_FROM)


def template_of(task: Task) -> str:
    return task.provenance.template_id or task.id


def alternatives(tasks: list[Task]) -> list[Alternative]:
    found = []
    for task in tasks:
        for turn in task.graded_turns():
            golds = task.turn_task(turn).gold_sql
            first = reading(golds[0]) if golds else {}
            for k, sql in enumerate(golds[1:], 1):
                this = reading(sql)
                differs = {r: (first.get(r, "-"), this.get(r, "-")) for r in first.keys() | this.keys()}
                found.append(
                    Alternative(task.id, template_of(task), turn, k, {r: d for r, d in differs.items() if d[0] != d[1]})
                )
    return found


def recorded(path: Path = RECORDED_PATH) -> dict[str, dict[str, str]]:
    """Template -> rule -> why its alternative golds read that rule otherwise."""
    return {t: dict(rules) for t, rules in json.loads(path.read_text(encoding="utf-8"))["templates"].items()}


def problems(tasks: list[Task], version: str, reasons: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Golds that contradict the dictionary, alternatives that differ without a recorded reason, stale reasons
    and graded turns that repeat another's: empty before READINGS_FROM."""
    if not held(version):
        return []
    reasons = recorded() if reasons is None else reasons
    found = [
        f"{task.id} turn {turn} gold #{k}: {rule} read as '{how}', which the dictionary rules out"
        for task in tasks
        for turn in task.graded_turns()
        for k, sql in enumerate(task.turn_task(turn).gold_sql)
        for rule, how in reading(sql).items()
        if NEVER_A_GOLD.get(rule) == how
    ]
    used: set[tuple[str, str]] = set()
    for alt in alternatives(tasks):
        for rule, (first, this) in alt.differs.items():
            if rule in AUDITED and rule in reasons.get(alt.template, {}):
                used.add((alt.template, rule))
            elif rule in AUDITED:
                found.append(
                    f"{alt.task} turn {alt.turn} gold #{alt.gold}: reads the {rule} as '{this}' where the first gold "
                    f"reads '{first}', and no reason is recorded for template {alt.template} ({RECORDED_PATH.name})"
                )
    templates = {template_of(t) for t in tasks}
    found += [
        f"{RECORDED_PATH.name}: the reason for {t}'s {rule} is stale (no alternative of it differs there)"
        for t, rules in reasons.items()
        for rule in rules
        if t in templates and (t, rule) not in used
    ]
    return found + repeated_turns(tasks)


def repeated_turns(tasks: list[Task]) -> list[str]:
    """Graded turns with the same golds answer the same question: each would weigh twice in accuracy."""
    owners: dict[frozenset[str], str] = {}
    found = []
    for task in tasks:
        for turn in task.graded_turns():
            golds = frozenset(fingerprint.exact(sql) for sql in task.turn_task(turn).gold_sql)
            if not golds:  # an unanswerable question is graded on its refusal, not on a gold
                continue
            here = f"{task.id} turn {turn}"
            if golds in owners:
                found.append(f"{here} repeats the graded turn {owners[golds]} (the same golds)")
            owners.setdefault(golds, here)
    return found


def table(tasks: list[Task], reasons: dict[str, dict[str, str]] | None = None) -> list[tuple[str, str, int, str]]:
    """(template, rule, alternatives, verdict) for every rule an alternative reads otherwise than its first gold."""
    reasons = recorded() if reasons is None else reasons
    counts = Counter((alt.template, rule) for alt in alternatives(tasks) for rule in alt.differs)
    return [
        (
            template,
            rule,
            n,
            reasons.get(template, {}).get(rule) or ("ruled out" if rule in NEVER_A_GOLD else "no reason"),
        )
        for (template, rule), n in sorted(counts.items())
    ]


def _unreasoned(rule: str) -> str:
    return "ruled out" if rule in NEVER_A_GOLD else "no reason"
