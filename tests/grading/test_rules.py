"""The comparator's rules as one current list (grading/rules.py): every rule names a module and proofs that
exist, every audit transform proves a rule, the acceptance table is the order gold_match reads a prediction,
and the page a person reads (docs/scoring.md) and the comparator's docstring say the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from evalpkg.grading import comparator, execution
from evalpkg.grading.labels import Labels
from evalpkg.grading.rules import ACCEPTANCE, RULES, render_markdown
from evalpkg.settings import PROJECT_ROOT
from evalpkg.sql.executor import QueryResult, ReadOnlyExecutor
from evalpkg.sql.gold import GoldRunner
from evalpkg.testset import audit
from evalpkg.testset.models import Task
from tests.testset.test_models_and_fingerprints import task_dict

TRANSFORMS = {*audit.LAYOUTS, *audit.MUTATIONS, audit.PERIOD_MOVED}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.principle[:40])
def test_every_rule_names_its_module_and_proofs_that_exist(rule: Any) -> None:
    package = "" if "/" in rule.module else "grading"  # testset/models.py: a path from evalpkg/
    assert (PROJECT_ROOT / "evalpkg" / package / rule.module).is_file(), rule.module
    assert rule.proofs, "a rule without a proof is a wish"
    for proof in rule.proofs:
        if "::" in proof:
            path, function = proof.split("::")
            assert f"def {function}(" in (PROJECT_ROOT / path).read_text(encoding="utf-8"), proof
        else:
            assert proof in TRANSFORMS, f"{proof}: no audit layout or mutation of that name"


def test_every_audit_transform_proves_a_rule() -> None:
    proved = {p for rule in RULES for p in rule.proofs}
    assert TRANSFORMS - proved == set(), "an audit transform that proves no listed rule: add or name the rule"


class Stand:
    """A gold source whose every query returns the one gold: what gold_match reads is all that is measured."""

    row_cap = None

    def run(self, sql: str, *, checked: bool = False) -> QueryResult:
        rows: list[list[Any]] = [["内科", 10], ["外科", 20]]
        return QueryResult(["dept", "n"], rows, len(rows), False, 0.0)


def test_the_acceptance_table_is_the_order_gold_match_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []

    def recorded(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            called.append(name)
            return original(*args, **kwargs)

        return wrapper

    for reading in ACCEPTANCE:
        monkeypatch.setattr(
            execution, reading.function, recorded(reading.function, getattr(execution, reading.function))
        )
    cache = execution.GoldCache(GoldRunner(cast(ReadOnlyExecutor, Stand())))
    cache._labels = Labels.builtin()  # no dictionary to read
    task = Task.model_validate(task_dict(gold_sql=["select dept, n from t"], answer_points=[]))
    # no reading accepts it, and it has more rows than the gold: every reading is tried
    wrong = execution.prediction_of(["dept", "n"], [["内科", 11], ["外科", 21], ["合计", 32]])
    assert execution.gold_match(task, wrong, cache)[0] is False
    first_calls = list(dict.fromkeys(called))
    assert first_calls == [r.function for r in ACCEPTANCE]


def test_the_docstring_names_the_current_version_and_defers_to_the_list() -> None:
    doc = comparator.__doc__ or ""
    assert f"version {comparator.COMPARATOR_VERSION}" in doc and "rules.py" in doc
    assert "Added in" not in doc, "the history lives in docs/scoring.md"


def test_docs_show_the_rules_as_the_code_holds_them() -> None:
    page = (PROJECT_ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    assert render_markdown() in page, "docs/scoring.md: paste `python -m evalpkg.grading.rules` into its rules section"
