"""Long vs wide: a prediction in the other layout matches where its labels name the gold's outputs,
and only then. Every case names its reason, wired through comparator.match as execution_match grades: the
plain comparison first, then each relayout."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from evalpkg.db import connect
from evalpkg.grading.comparator import match
from evalpkg.grading.cross import period_index
from evalpkg.grading.labels import Labels, code_pairs, contains
from evalpkg.grading.periods import one_year
from evalpkg.grading.pivot import MAX_RELAYOUTS, relayouts
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sync.runner import SyncReport

DICTIONARY_CSV = Path(__file__).resolve().parents[2] / "evalpkg" / "prod" / "data_dictionary.csv"
DEPTS = [
    ("0101", "心血管内科", "Cardiology"),
    ("0102", "内分泌科", "Endocrinology"),
    ("0104", "消化内科", "Gastroenterology"),
]
LABELS = Labels.from_rows(
    [("dept", d) for d in DEPTS],
    [(r["table_name"], r["column_name"], r["code_mapping"]) for r in csv.DictReader(DICTIONARY_CSV.open())],
)
Rows = list[list[Any]]


def graded(pred: Rows, pred_columns: list[str], gold: Rows, gold_columns: list[str], names: list[list[str]]) -> bool:
    """What execution_match decides: the plain comparison, else the first relayout that matches."""
    if match(pred, gold):
        return True
    candidates = relayouts(pred, pred_columns, gold, gold_columns, names, LABELS)
    return any(match(r.pred, r.gold, pinned=r.pinned) for r in candidates)


# st-patients_sex_by_age_group: one wide row, named by the task's outputs.
SEX_GOLD, SEX_COLUMNS = [[10, 12, 1]], ["male", "female", "unknown"]
SEX_NAMES = [
    ["male", "男性患者数", "male patients"],
    ["female", "女性患者数", "female patients"],
    ["unknown", "性别未知或未说明的患者数", "patients of unknown or unstated sex"],
]


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        ([["男", 10], ["女", 12], ["未知", 1]], True, "zh labels from the code mapping"),
        ([["male", 10], ["female", 12], ["unknown", 1]], True, "en labels from the word file"),
        ([["Male", 10], ["FEMALE", 12], ["Unknown", 1]], True, "labels are case-folded"),
        ([["男性", 10], ["女性", 12], ["未知", 1]], True, "zh variants of the code words"),
        ([["male patients", 10], ["female patients", 12], ["unknown", 1]], True, "labels as the outputs' meanings"),
        ([["男 male", 10], ["女 female", 12], ["未知 unknown", 1]], True, "two names of one entry"),
        ([["男 female", 10], ["女 male", 12], ["未知 unknown", 1]], False, "two names of two entries"),
        ([[1, 10], [2, 12], [0, 1]], True, "xb codes as integers"),
        ([["0", 1], ["2", 12], ["1", 10]], True, "xb codes as text, rows in any order"),
        ([["男", 10, 0.43], ["女", 12, 0.52], ["未知", 1, 0.04]], True, "a share beside each count is an extra column"),
        ([["男", 10], ["女", 12], ["未知", 1], ["合计", 23]], True, "a label naming no output is an extra row"),
        ([[10], [12], [1]], False, "an unlabelled long form: the labels carry the meaning"),
        ([[1, 12], [2, 10], [3, 1]], False, "row numbers are no sex codes: unknown is unnamed, and 1 is not 12"),
        ([["女", 10], ["男", 12], ["未知", 1]], False, "values under the wrong labels (swapped)"),
        ([["男", 10], ["女", 13], ["未知", 1]], False, "a value changed"),
        ([["男", 10], ["女", 12]], False, "a label missing"),
        ([["男", 10], ["女", 12], ["其他", 1]], False, "a label that names no output in place of one that does"),
        ([["male", 10], ["patients", 12], ["unknown", 1]], False, "an ambiguous label (names every output)"),
        ([["男", 10], ["男", 12], ["未知", 1]], False, "one label twice"),
        ([["未知", 1], ["未说明", 0], ["男", 10], ["女", 12]], False, "two labels naming one output"),
    ],
)
def test_long_prediction_of_a_wide_gold(pred: Rows, expected: bool, why: str) -> None:
    columns = ["sex", "patients", "share"][: len(pred[0])]
    assert graded(pred, columns, SEX_GOLD, SEX_COLUMNS, SEX_NAMES) is expected, why


@pytest.mark.parametrize(
    ("pred", "gold", "gold_columns", "names", "expected", "why"),
    [
        (
            [[1, 40], [2, 7]],
            [[40, 7]],
            ["long_term", "temporary"],
            [
                ["long_term", "长期医嘱条数", "long-term orders"],
                ["temporary", "临时医嘱条数", "temporary (one-off) orders"],
            ],
            True,
            "yzlx codes name the outputs through their meanings ('临时医嘱/门诊处方' is split)",
        ),
        (
            [[1, 100], [2, 5], [4, 2], [5, 3], [9, 4]],
            [[3, 5, 2]],
            ["deaths", "transfers", "against_advice"],
            [
                ["deaths", "院内死亡出院人次（cyfs=5）", "in-hospital deaths (cyfs 5)"],
                ["transfers", "医嘱转院出院人次（cyfs=2）", "transfers by order (cyfs 2)"],
                ["against_advice", "非医嘱离院人次（cyfs=4）", "discharges against medical advice (cyfs 4)"],
            ],
            True,
            "cyfs codes; 医嘱离院 (1) is no part of 非医嘱离院",
        ),
        (
            [["MZ", 300], ["ZY", 45]],
            [[300, 45]],
            ["outpatient", "inpatient"],
            [["outpatient", "门诊人次", "outpatient visits"], ["inpatient", "住院人次", "inpatient admissions"]],
            True,
            "visit_type codes",
        ),
        (
            [["MZ", 45], ["ZY", 300]],
            [[300, 45]],
            ["outpatient", "inpatient"],
            [["outpatient", "门诊人次", "outpatient visits"], ["inpatient", "住院人次", "inpatient admissions"]],
            False,
            "visit_type codes, values swapped",
        ),
        (
            [["门诊", 300], ["住院", 45]],
            [[300, 45]],
            ["visits_a", "visits_b"],
            [[], []],
            False,
            "labels that name no gold column do not match by values alone",
        ),
        (
            [["1 valid HbA1c result", 39], ["2 tested, no valid result", 0], ["3 not tested", 22], ["4 total", 61]],
            [[39, 0, 22]],
            ["valid_result", "tested_no_result", "not_tested"],
            [["valid_result", "patients with a valid HbA1c result"], ["tested_no_result"], ["not_tested"]],
            True,
            "descriptive labels name the outputs whose words they hold, the most specific first",
        ),
        (
            [["1 valid HbA1c result", 0], ["2 tested, no valid result", 39], ["3 not tested", 22]],
            [[39, 0, 22]],
            ["valid_result", "tested_no_result", "not_tested"],
            [["valid_result"], ["tested_no_result"], ["not_tested"]],
            False,
            "the same labels with two numbers swapped",
        ),
    ],
)
def test_coded_labels(
    pred: Rows, gold: Rows, gold_columns: list[str], names: list[list[str]], expected: bool, why: str
) -> None:
    assert graded(pred, ["code", "n"], gold, gold_columns, names) is expected, why


# Two keys: department x month, long in the gold (ksmc, month, visits), wide in the prediction.
MONTHS = ["2024-01", "2024-02", "2024-03"]
DEPT_NAMES = [d[1] for d in DEPTS]
LONG: Rows = [[d, m, 10 * i + j] for i, d in enumerate(DEPT_NAMES) for j, m in enumerate(MONTHS)]
LONG_COLUMNS = ["ksmc", "month", "visits"]
WIDE: Rows = [[d, *(10 * i + j for j in range(3))] for i, d in enumerate(DEPT_NAMES)]


def wide(headers: list[str], key: str = "ksmc", rows: Rows = WIDE) -> tuple[Rows, list[str]]:
    return rows, [key, *headers]


@pytest.mark.parametrize(
    ("headers", "expected", "why"),
    [
        (MONTHS, True, "months as 'YYYY-MM' columns"),
        (["Jan 2024", "Feb 2024", "Mar 2024"], True, "English month and year"),
        (["2024年1月", "2024年2月", "2024年3月"], True, "zh month and year"),
        (["1月", "2月", "3月"], True, "zh months without the year: every label lies in 2024"),
        (["jan", "feb", "mar"], True, "English months without the year"),
        (["1", "2", "3"], True, "month numbers"),
        (["visits_2024_01", "visits_2024_02", "visits_2024_03"], True, "the month inside a longer header"),
        (["2024-02", "2024-03", "2024-04"], False, "the months are shifted by one"),
        (["2024-02", "2024-01", "2024-03"], False, "two months' values under each other's label"),
        (["a", "b", "c"], False, "unlabelled columns"),
        (["m1", "m2", "m3"], False, "'m1' does not say month (it could be male)"),
        (["2024-01", "2024-01", "2024-03"], False, "an ambiguous header: two columns for one month"),
    ],
)
def test_wide_prediction_of_a_long_gold(headers: list[str], expected: bool, why: str) -> None:
    pred, columns = wide(headers)
    assert graded(pred, columns, LONG, LONG_COLUMNS, [[], [], []]) is expected, why


@pytest.mark.parametrize(
    ("pred", "pred_columns", "expected", "why"),
    [
        (LONG, LONG_COLUMNS, True, "the long form of a wide gold, two keys"),
        ([[d, f"{m}-01", v] for d, m, v in LONG], ["ksmc", "m", "v"], True, "months as dates on the 1st"),
        ([[d, int(m[-2:]), v] for d, m, v in LONG], ["ksmc", "m", "v"], True, "months as numbers, one year"),
        ([[d, m, v] for d, m, v in LONG if v != 21], LONG_COLUMNS, False, "a missing row is no 21"),
        ([[d, m, 99 if v == 21 else v] for d, m, v in LONG], LONG_COLUMNS, False, "a value changed"),
        ([[d, v] for d, _, v in LONG], ["ksmc", "visits"], False, "the month label dropped"),
    ],
)
def test_long_prediction_of_a_wide_gold_with_two_keys(
    pred: Rows, pred_columns: list[str], expected: bool, why: str
) -> None:
    assert graded(pred, pred_columns, WIDE, ["ksmc", *MONTHS], [[], [], [], []]) is expected, why


def test_codes_name_the_columns_of_their_names() -> None:
    """The gold keyed by ksdm codes, the prediction's headers are the departments' English names."""
    gold = [[m, code, 10 * i + j] for i, (code, _, _) in enumerate(DEPTS) for j, m in enumerate(MONTHS)]
    pred = [[m, *(10 * i + j for i in range(3))] for j, m in enumerate(MONTHS)]
    headers = [d[2] for d in DEPTS]
    assert graded(pred, ["month", *headers], gold, ["month", "ksdm", "visits"], [[], [], []]), "ksdm vs ksmc_en"
    assert not graded(pred, ["month", *headers[::-1]], gold, ["month", "ksdm", "visits"], [[], [], []]), "reversed"


def test_a_missing_long_row_is_a_null_cell() -> None:
    gold = [[d, *(None if (i, j) == (1, 2) else 10 * i + j for j in range(3))] for i, d in enumerate(DEPT_NAMES)]
    pred = [[d, m, v] for d, m, v in LONG if v != 12]
    assert graded(pred, LONG_COLUMNS, gold, ["ksmc", *MONTHS], [[], [], [], []])


def test_month_names_without_a_year_need_one_year() -> None:
    gold = [["2023-12", 5], ["2024-01", 7]]
    assert graded([[5, 7]], ["2023-12", "2024-01"], gold, ["month", "n"], [[], []]), "with the years"
    assert not graded([[5, 7]], ["dec", "jan"], gold, ["month", "n"], [[], []]), "the labels span two years"


def test_quarters() -> None:
    gold = [["2024-Q1", 5], ["2024-Q2", 7], ["2024-Q3", 9]]
    assert graded([[5, 7, 9]], ["Q1", "Q2", "Q3"], gold, ["quarter", "n"], [[], []])
    assert graded([[5, 7, 9]], ["2024年第一季度", "2024年第二季度", "2024年第三季度"], gold, ["quarter", "n"], [[], []])
    assert not graded([[7, 5, 9]], ["Q1", "Q2", "Q3"], gold, ["quarter", "n"], [[], []])


def test_a_fractional_tolerance_still_applies() -> None:
    pred = [["male", 45.0000001], ["female", 54.9999999]]
    candidates = relayouts(pred, ["sex", "pct"], [[45.0, 55.0]], ["male_pct", "female_pct"], [[], []], LABELS)
    assert any(match(r.pred, r.gold, pinned=r.pinned, rel_tol=1e-6) for r in candidates)


def test_nothing_to_pivot_yields_nothing_and_candidates_are_few() -> None:
    assert list(relayouts([[10], [12]], ["n"], SEX_GOLD, SEX_COLUMNS, SEX_NAMES, LABELS)) == []
    assert list(relayouts([["x", 1], ["y", 2]], ["k", "n"], [[1, 2]], ["a", "b"], [[], []], LABELS)) == []
    many = [[f"2024-{m:02d}", m, m * 2, m * 3] for m in range(1, 13)]
    wide_gold = [list(range(1, 13))]
    found = list(
        relayouts(many, ["month", "a", "b", "c"], wide_gold, [f"2024-{m:02d}" for m in range(1, 13)], [], LABELS)
    )
    assert 0 < len(found) <= MAX_RELAYOUTS


def test_label_helpers() -> None:
    assert code_pairs("0=未知 1=男 2=女 9=未说明 (GB/T 2261.1)") == [
        ("0", "未知"),
        ("1", "男"),
        ("2", "女"),
        ("9", "未说明"),
    ]
    assert code_pairs("F=终审 C=作废(结果无效，统计时应排除)") == [("F", "终审"), ("C", "作废")]
    assert code_pairs("见 dict_dept.ksdm") == []
    assert code_pairs("抗凝药=华法林/利伐沙班; 胰岛素") == [], "a category is no code"
    assert contains("male patients", "male") and not contains("female patients", "male")
    assert contains("男性患者数", "男") and not contains("2024年11月", "1月")
    assert not contains("非医嘱离院人次", "医嘱离院", ["非医嘱离院"])
    assert one_year(["2024 01", "jan", "2024 03"]) == "2024" and one_year(["2023 12", "2024 01"]) is None
    builtin = Labels.builtin()
    assert builtin.ids("male") & builtin.ids("男") and not builtin.ids("male") & builtin.ids("female")
    assert not builtin.ids("1") & builtin.ids("男"), "codes come from the database, not the word file"


def test_labels_from_the_eval_db(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(EVAL_DB)) as conn:
        labels = Labels.from_connection(conn)
    assert labels.ids("0101") & labels.ids("心血管内科") & labels.ids("cardiology"), "dict_dept: ksdm, ksmc, ksmc_en"
    assert labels.ids("GLU") & labels.ids("空腹血糖"), "dict_lab_item"
    assert labels.ids("Y0001") & labels.ids("metformin"), "dict_drug"
    assert labels.ids("1") & labels.ids("male") and labels.ids("2") & labels.ids("女"), "meta.data_dictionary xb"
    assert labels.ids("ZY") & labels.ids("inpatient"), "visit_type, through the word file"
    through_grader = Labels.from_executor(ReadOnlyExecutor(generated.agent_url()))
    assert through_grader.ids("0101") & through_grader.ids("cardiology"), "as the grader's role reads them"
    with connect(generated.admin_url) as conn:  # a database without the tables: fewer aliases, no failure
        bare = Labels.from_connection(conn)
    assert bare.ids("male") & bare.ids("男") and not bare.ids("0101") & bare.ids("cardiology")


def test_sources_carry_a_rate_column_through_the_pivot() -> None:
    """The gold's rate column becomes one column per label: each is a rate, given as fraction or percent."""
    gold = [["2024-01", 45.0], ["2024-02", 55.5]]
    found = list(relayouts([[0.45, 0.555]], ["2024-01", "2024-02"], gold, ["month", "pct"], [[], []], LABELS))
    assert [r.sources for r in found] == [[1, 1]]
    rates = [k for k, j in enumerate(found[0].sources) if j == 1]
    assert match(found[0].pred, found[0].gold, pinned=found[0].pinned, rates=rates)
    assert not match(found[0].pred, found[0].gold, pinned=found[0].pinned), "without rates 0.45 is not 45"


# Cross pivots: a row label and a column header together name a gold column.
# anom-anomaly_visits_month_by_type: one wide row, visit type x month.
VISITS_GOLD, VISITS_COLUMNS = [[48, 34, 4, 15]], ["mz_prev", "mz_this", "zy_prev", "zy_this"]
VISITS_NAMES = [
    ["mz_prev", "上月门诊人次", "outpatient visits, previous month"],
    ["mz_this", "本月门诊人次", "outpatient visits, this month"],
    ["zy_prev", "上月住院人次", "inpatient admissions, previous month"],
    ["zy_this", "本月住院人次", "inpatient admissions, this month"],
]
VISITS_HEADERS = ["visit_type", "prev_month_visits", "this_month_visits", "change", "pct_change"]
VISITS_PRED = [["MZ", 48, 34, -14, -29.2], ["ZY", 4, 15, 11, 275.0], ["TOTAL", 52, 49, -3, -5.8]]


@pytest.mark.parametrize(
    ("pred", "pred_columns", "expected", "why"),
    [
        (VISITS_PRED, VISITS_HEADERS, True, "MZ x prev names mz_prev; change columns extra; TOTAL sums the rows"),
        ([r[:3] for r in VISITS_PRED[:2]], VISITS_HEADERS[:3], True, "without the extra columns and the total"),
        ([["ZY", 4, 15], ["MZ", 48, 34]], VISITS_HEADERS[:3], True, "rows in any order"),
        ([["门诊", 48, 34], ["住院", 4, 15]], ["类型", "上月人次", "本月人次"], True, "zh labels and headers"),
        ([["outpatient", 48, 34], ["inpatient", 4, 15]], ["type", "last_month", "current_month"], True, "synonyms"),
        ([["prev", 48, 4], ["this", 34, 15]], ["month", "outpatient", "inpatient"], True, "transposed"),
        ([["上月", 48, 4], ["本月", 34, 15]], ["月份", "门诊", "住院"], True, "transposed, zh"),
        (
            [["2025-06", 48, 4, 52], ["2025-07", 34, 15, 49]],
            ["month", "outpatient_visits", "inpatient_admissions", "total_visits"],
            True,
            "months as rows; the total shares 'visits' with outpatient_visits, which holds more of mz's words",
        ),
        (
            [["2025-06", 48, 4, 52], ["2025-07", 34, 15, 49]],
            ["month", "outpatient", "inpatient_admissions", "outpatient_total"],
            True,
            "months as rows: each count column found by its two months' values (series.py), the total extra",
        ),
        ([["MZ", 4, 15], ["ZY", 48, 34]], VISITS_HEADERS[:3], False, "MZ's numbers swapped with ZY's"),
        ([["MZ", 34, 48], ["ZY", 15, 4]], VISITS_HEADERS[:3], False, "this month's numbers under prev"),
        ([["MZ", 48, 35], ["ZY", 4, 15]], VISITS_HEADERS[:3], False, "a value changed"),
        ([[48, 34], [4, 15]], VISITS_HEADERS[1:3], False, "an unlabelled layout: no label column"),
        ([["x", 48, 34], ["y", 4, 15]], VISITS_HEADERS[:3], False, "labels that name no visit type"),
        ([["MZ", 48, 34], ["ZY", 4, 15]], ["type", "first", "second"], False, "headers that name no month"),
        ([["MZ", 48, 34], ["ZY", 4, 15]], ["type", "prev_month_visits", "visits"], False, "one month unnamed"),
        ([["MZ", 48], ["ZY", 4]], VISITS_HEADERS[:2], False, "this month missing"),
        (
            [["MZ", 48, 34], ["ZY", 4, 15], ["rest of hospital", 9, 9]],
            VISITS_HEADERS[:3],
            False,
            "an extra scope row is an extra row",
        ),
        ([*VISITS_PRED[:2], ["TOTAL", 60, 49, -3, -5.8]], VISITS_HEADERS, False, "a total row that is no sum"),
        ([["MZ", 48, 34], ["ZY", 4, 15]], ["type", "prev_this_visits", "this_visits"], False, "an ambiguous header"),
        ([["MZ", 48, 34], ["MZ", 4, 15]], VISITS_HEADERS[:3], False, "one label twice"),
    ],
)
def test_cross_of_visit_types_and_months(pred: Rows, pred_columns: list[str], expected: bool, why: str) -> None:
    assert graded(pred, pred_columns, VISITS_GOLD, VISITS_COLUMNS, VISITS_NAMES) is expected, why


def test_a_cross_keyed_by_department() -> None:
    """The other columns key the wide rows: department x visit type x month."""
    gold = [["心血管内科", 48, 34, 4, 15], ["内分泌科", 20, 21, 2, 3]]
    columns, names = ["ksmc", *VISITS_COLUMNS], [[], *VISITS_NAMES]
    pred = [
        ["心血管内科", "MZ", 48, 34],
        ["心血管内科", "ZY", 4, 15],
        ["内分泌科", "MZ", 20, 21],
        ["内分泌科", "ZY", 2, 3],
    ]
    pred_columns = ["dept", *VISITS_HEADERS[:3]]
    assert graded(pred, pred_columns, gold, columns, names), "keyed by department"
    swapped = [[d, t, *((21, 20) if v == [20, 21] else v)] for d, t, *v in pred]
    assert not graded(swapped, pred_columns, gold, columns, names), "one department's months swapped"


# anom-anomaly_lab_abnormal_rate_month: two consecutive months as labels, the gold speaks of prev and this.
LAB_COLUMNS = ["prev_tests", "prev_abnormal", "prev_pct", "this_tests", "this_abnormal", "this_pct"]
LAB_NAMES = [
    ["prev_tests", "上月有效检测数", "tests with a valid result, previous month"],
    ["prev_abnormal", "上月异常数", "abnormal results, previous month"],
    ["prev_pct", "上月异常率（百分比）", "abnormal rate, previous month (percent)"],
    ["this_tests", "本月有效检测数", "tests with a valid result, this month"],
    ["this_abnormal", "本月异常数", "abnormal results, this month"],
    ["this_pct", "本月异常率（百分比）", "abnormal rate, this month (percent)"],
]
LAB_ASKED = [0, 1, 3, 4]  # the plain variants ask for the counts only
LAB_GOLD = [[18, 7, 38.89, 18, 3, 16.67]]
LAB_HEADERS = ["month", "n_tests", "n_abnormal", "abnormal_rate_pct"]
LAB_PRED = [["2023-02", 18, 7, 38.89], ["2023-03", 18, 3, 16.67]]


@pytest.mark.parametrize(
    ("pred", "pred_columns", "asked", "expected", "why"),
    [
        (LAB_PRED, LAB_HEADERS, LAB_ASKED, True, "the later month is this, the earlier prev; the rate is extra"),
        (LAB_PRED, LAB_HEADERS, list(range(6)), True, "with the rates asked: a rate header names a rate"),
        (LAB_PRED[::-1], LAB_HEADERS, LAB_ASKED, True, "rows in any order"),
        ([["2023-02-01", 18, 7], ["2023-03-01", 18, 3]], LAB_HEADERS[:3], LAB_ASKED, True, "months as dates"),
        ([["Dec 2022", 18, 7], ["Jan 2023", 18, 3]], LAB_HEADERS[:3], LAB_ASKED, True, "across a year's end"),
        ([["2023-02", 18, 3], ["2023-03", 18, 7]], LAB_HEADERS[:3], LAB_ASKED, False, "months' values swapped"),
        ([["2023-01", 18, 7], ["2023-03", 18, 3]], LAB_HEADERS[:3], LAB_ASKED, False, "months not consecutive"),
        (
            [["2023-01", 1, 1], ["2023-02", 18, 7], ["2023-03", 18, 3]],
            LAB_HEADERS[:3],
            LAB_ASKED,
            False,
            "three months: which one is prev is unsaid",
        ),
        ([["a", 18, 7], ["b", 18, 3]], LAB_HEADERS[:3], LAB_ASKED, False, "labels that are no months"),
        (
            [["2023-02", 18, 7], ["2023-03", 18, 3]],
            ["month", "n", "m"],
            LAB_ASKED,
            True,
            "headers that say nothing: by values",
        ),
        ([["2023-02", 7], ["2023-03", 3]], LAB_HEADERS[::2], LAB_ASKED, False, "the tests missing"),
        (
            LAB_PRED,
            ["month", "n_tests", "n_abnormal", "abnormal_tests"],
            LAB_ASKED,
            True,
            "names never decide: by values",
        ),
        (
            LAB_PRED,
            ["month", "wbc_results", "abnormal_results", "abnormal_pct"],
            LAB_ASKED,
            True,
            "'wbc_results' outdone by 'abnormal_results' for the abnormal count is the tests, the count left",
        ),
        (
            [["2023-02", 7, 18, 38.89], ["2023-03", 3, 18, 16.67]],
            ["month", "wbc_results", "abnormal_results", "abnormal_pct"],
            LAB_ASKED,
            True,
            "the same headers over swapped counts: a month's columns are found by values, as in any layout",
        ),
    ],
)
def test_cross_of_consecutive_months_and_measures(
    pred: Rows, pred_columns: list[str], asked: list[int], expected: bool, why: str
) -> None:
    gold = [[row[j] for j in asked] for row in LAB_GOLD]
    columns, names = [LAB_COLUMNS[j] for j in asked], [LAB_NAMES[j] for j in asked]
    assert graded(pred, pred_columns, gold, columns, names) is expected, why


# fu_admissions_change_by_dept: two months compared (zy_prev, zy_this) answered as a period series, one row per
# month under one count column; the follow-up keeps the department as the rows' key.
SERIES_COLUMNS = ["zy_prev", "zy_this"]
SERIES_NAMES = [
    ["zy_prev", "上月住院人次", "admissions the month before"],
    ["zy_this", "本月住院人次", "admissions this month"],
]


@pytest.mark.parametrize(
    ("pred", "pred_columns", "expected", "why"),
    [
        ([["2022-03", 41], ["2022-04", 52]], ["month", "admissions"], True, "a month names its column alone"),
        ([["2022年4月", 52], ["2022年3月", 41]], ["月份", "住院人次"], True, "zh months, any order"),
        ([["2022-03", 52], ["2022-04", 41]], ["month", "admissions"], False, "the months' values swapped"),
        ([["2022-02", 41], ["2022-04", 52]], ["month", "admissions"], False, "months not consecutive"),
        (
            [["2022-03", 41, 40], ["2022-04", 52, 50]],
            ["month", "admissions", "patients"],
            True,
            "an extra count beside it",
        ),
        ([["2022-03", 41.5], ["2022-04", 52.5]], ["month", "admission_rate"], False, "a rate stands for no count"),
    ],
)
def test_a_comparison_answered_as_a_period_series(
    pred: Rows, pred_columns: list[str], expected: bool, why: str
) -> None:
    assert graded(pred, pred_columns, [[41, 52]], SERIES_COLUMNS, SERIES_NAMES) is expected, why


def test_a_comparison_by_department_answered_as_a_period_series() -> None:
    gold = [["心血管内科", 8, 11], ["内分泌科", 5, 3]]
    columns, names = ["department", *SERIES_COLUMNS], [["department", "科室"], *SERIES_NAMES]
    pred = [
        ["心血管内科", "2022-03", 8],
        ["心血管内科", "2022-04", 11],
        ["内分泌科", "2022-03", 5],
        ["内分泌科", "2022-04", 3],
    ]
    assert graded(pred, ["department", "month", "admissions"], gold, columns, names), "keyed by department"
    pred[0][2], pred[1][2] = 11, 8
    assert not graded(pred, ["department", "month", "admissions"], gold, columns, names), "one department swapped"


# anomaly_dept_admissions_month: a department's change beside the hospital's, one wide row in the gold.
SCOPE_GOLD, SCOPE_COLUMNS = [[8, 1, 16, 5]], ["dept_prev", "dept_this", "hospital_prev", "hospital_this"]
SCOPE_NAMES = [
    ["department admissions, previous month"],
    ["department admissions, this month"],
    ["hospital admissions, previous month"],
    ["hospital admissions, this month"],
]
BY_MONTH = ["scope", "nov_2024", "dec_2024", "change"]
COUNTED = ["scope", "admissions_nov_2024", "admissions_dec_2024", "change"]
TWO_EACH = ["scope", "nov_vs_dec_2024_first", "nov_vs_dec_2024_second", "change"]


@pytest.mark.parametrize(
    ("pred", "columns", "expected", "why"),
    [
        ([["Cardiology", 8, 1, -7], ["Hospital-wide", 16, 5, -11]], BY_MONTH, True, "rows by scope, months as columns"),
        ([["心血管内科", 8, 1, -7], ["全院 hospital", 16, 5, -11]], BY_MONTH, True, "the department's zh name"),
        ([["Cardiology", 1, 8, 7], ["Hospital-wide", 5, 16, 11]], BY_MONTH, False, "the months swapped"),
        ([["Cardiology", 16, 5, -11], ["Hospital-wide", 8, 1, -7]], BY_MONTH, False, "the scopes swapped"),
        ([["Cardiology", 8, 1, -7], ["Hospital-wide", 16, 5, -11]], ["scope", "a", "b", "c"], False, "no months"),
        # a header that names its month among other words (what was counted) speaks of that month (v9 study 2 R08)
        ([["Cardiology 心血管内科", 8, 1, -7], ["Hospital-wide 全院", 16, 5, -11]], COUNTED, True, "counted words"),
        ([["Cardiology", 1, 8, 7], ["Hospital-wide", 5, 16, 11]], COUNTED, False, "counted words, months swapped"),
        ([["Cardiology", 8, 1, -7], ["Hospital-wide", 16, 5, -11]], TWO_EACH, False, "headers naming two months"),
    ],
)
def test_a_department_beside_the_hospital_by_month(pred: Rows, columns: list[str], expected: bool, why: str) -> None:
    assert graded(pred, columns, SCOPE_GOLD, SCOPE_COLUMNS, SCOPE_NAMES) is expected, why


@pytest.mark.parametrize(
    ("label", "month", "why"),
    [
        ("nov_2024", "2024-11", "the period alone"),
        ("admissions_nov_2024", "2024-11", "what was counted, then when"),
        ("visits in Nov 2024", "2024-11", "words around the period"),
        ("2018-01-28", None, "a day is no month"),
        ("nov_vs_dec_2024", None, "two months"),
        ("Q4 2023 n=5", None, "a number beside the period says more than what was counted"),
    ],
)
def test_a_period_named_among_other_words(label: str, month: str | None, why: str) -> None:
    expected = None if month is None else 12 * int(month[:4]) + int(month[5:]) - 1
    assert period_index(label, None) == expected, why


# anomaly_alos_sharpest_fall_quarter: a comparison keyed by its own quarter (quarter_start, its first month),
# answered as two rows labelled by role, the quarter in a column, the measures under other words.
QUARTER_GOLD = [["2023-10", 11.12, 5.95, 7, 1]]
QUARTER_COLUMNS = ["quarter_start", "prev_avg_los", "cur_avg_los", "prev_long_stays", "cur_long_stays"]
QUARTER_NAMES = [["first month of that quarter"], *([] for _ in QUARTER_COLUMNS[1:])]
QUARTER_HEADERS = ["role", "quarter", "discharges", "alos_days", "stays_over_14d"]


@pytest.mark.parametrize(
    ("pred", "expected", "why"),
    [
        ([["previous quarter", "2023-Q3", 33, 11.12, 7], ["drop quarter", "2023-Q4", 21, 5.95, 1]], True, "by role"),
        ([["drop", "2023年第四季度", 21, 5.95, 1], ["before", "2023年第三季度", 33, 11.12, 7]], True, "zh quarters"),
        ([["previous quarter", "2023-Q4", 33, 11.12, 7], ["drop quarter", "2023-Q3", 21, 5.95, 1]], False, "swapped"),
        (
            [["previous quarter", "2023-Q2", 33, 11.12, 7], ["drop quarter", "2023-Q3", 21, 5.95, 1]],
            False,
            "a quarter early",
        ),
        (
            [["previous quarter", "2023-Q3", 33, 11.12, 7], ["drop quarter", "2023-Q4", 21, 5.95, 2]],
            False,
            "a count off",
        ),
        (
            [["previous quarter", "2023-Q3", 33, 11.12, 7], ["drop quarter", "2023-Q3", 21, 5.95, 1]],
            False,
            "one quarter",
        ),
    ],
)
def test_a_comparison_keyed_by_its_period_answered_as_period_rows(pred: Rows, expected: bool, why: str) -> None:
    assert graded(pred, QUARTER_HEADERS, QUARTER_GOLD, QUARTER_COLUMNS, QUARTER_NAMES) is expected, why


# anom-anomaly_retired_dept_admissions_drop: admissions in 2018-2020 against 2021-2023, one wide row.
RETIRED_GOLD = [["老年病科(停用)", 1, 723, 45]]
RETIRED_COLUMNS = ["ksmc", "ty_bz", "prev_admissions", "this_admissions"]


@pytest.mark.parametrize(
    ("earlier", "later", "values", "expected", "why"),
    [
        ("2018-2020", "2021-2023", (723, 45), True, "ranges with a hyphen"),
        ("2018–2020", "2021–2023", (723, 45), True, "ranges with an en dash"),
        ("2018至2020", "2021至2023", (723, 45), True, "ranges in Chinese"),
        ("2018年-2020年", "2021年-2023年", (723, 45), True, "ranges of years written 年"),
        ("2018 to 2020", "2021 to 2023", (723, 45), True, "ranges in words"),
        ("2018-2020", "2021-2023", (45, 723), False, "each range's numbers under the other's label"),
        ("2018-2020", "2022-2023", (723, 45), False, "runs that leave a year out are no two sides of a comparison"),
        ("2018-2021", "2021-2023", (723, 45), False, "runs that overlap"),
        ("2018", "2021-2023", (723, 45), False, "a year is no run of years"),
    ],
)
def test_a_comparison_of_runs_of_years_answered_as_rows_labelled_by_them(
    earlier: str, later: str, values: tuple[int, int], expected: bool, why: str
) -> None:
    pred = [["老年病科(停用)", 1, earlier, values[0]], ["老年病科(停用)", 1, later, values[1]]]
    columns = ["ksmc", "ty_bz", "years", "admissions"]
    assert graded(pred, columns, RETIRED_GOLD, RETIRED_COLUMNS, [[] for _ in RETIRED_COLUMNS]) is expected, why
    assert graded(pred[::-1], columns, RETIRED_GOLD, RETIRED_COLUMNS, [[] for _ in RETIRED_COLUMNS]) is expected, why
