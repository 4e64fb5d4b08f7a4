"""The comparator's rules as one current list, and the order in which a prediction is read against a gold.

Each rule states its principle ("correct" means what a careful human grader accepts, and nothing more lenient),
the module that holds it, and what proves it: an audit layout a grader accepts or a mutation a grader rejects
(`evalpkg testset audit-scorer`, testset/audit.py), or a test. tests/grading/test_rules.py checks that every
module and proof exists and that ACCEPTANCE is the order gold_match tries; docs/scoring.md shows both tables
(render_markdown), and a test keeps the page equal to them. How the rules came to be, version by version, is
docs/scoring.md's history."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    principle: str
    module: str  # under evalpkg/grading/ (or under evalpkg/ where it names its package: testset/models.py)
    proofs: tuple[str, ...]  # audit transforms by name, or tests as 'tests/<path>.py::<function>'


@dataclass(frozen=True)
class Reading:
    """One way gold_match reads a prediction against an acceptable gold, in the order they are tried."""

    name: str
    function: str  # the name evalpkg.grading.execution calls it by
    what: str


COMPARATOR = "tests/grading/test_comparator.py"
PIVOTS = "tests/grading/test_comparator_pivots.py"
RELABEL = "tests/grading/test_relabel.py"
VARIANTS = "tests/pipeline/test_variant_grading.py"
COMPOSED = "tests/grading/test_composed_readings.py"

RULES: tuple[Rule, ...] = (
    # columns
    Rule(
        "Every gold column needs a prediction column of its own; extra columns, column order and names do not "
        "matter (columns are found by assignment, and identical columns are interchangeable).",
        "matching.py",
        ("extra_columns", "permuted_columns", "renamed_columns", f"{COMPARATOR}::test_identical_columns_do_not_branch"),
    ),
    Rule(
        "A prediction column named like a gold column claims that meaning: two counts of one type cannot trade "
        "places, and a column named like a gold column the variant does not ask for stands for no asked one.",
        "execution.py",
        (f"{VARIANTS}::test_a_variant_is_graded_on_what_it_asks",),
    ),
    Rule(
        "A column of fractions (a rate, a mean) is never stood for by whole numbers (a count), however close "
        "within the task's tolerance.",
        "columns.py",
        ("count_for_fraction",),
    ),
    Rule(
        "Where a task has several golds (layouts a grader accepts alike), a prediction that matches one is right; "
        "each variant is graded on the columns it asks for, by the golds that return them.",
        "execution.py",
        (f"{VARIANTS}::test_a_gold_answers_only_the_variants_whose_columns_it_returns",),
    ),
    Rule(
        "A wording that names the readings it admits (a technical one saying 'orders started (kssj) in 2023') is "
        "graded against those golds only; every other wording against each of the task's golds.",
        "testset/models.py",
        (f"{VARIANTS}::test_a_wording_is_graded_against_the_golds_it_admits",),
    ),
    # rows
    Rule(
        "Rows are a bag, compared in the gold's ORDER BY order only where the task says order matters.",
        "comparator.py",
        ("shuffled_rows", "rows_out_of_order", "row_dropped", "row_added", "row_duplicated"),
    ),
    Rule(
        "Rows tied on the gold's ORDER BY keys (the gold re-run with keys no output shows as hidden columns) "
        "match in any order; a trailing id, code or name only breaks ties.",
        "ties.py",
        ("tie_reorder", f"{COMPARATOR}::test_tie_groups_from_hidden_keys"),
    ),
    Rule(
        "Where the gold's LIMIT cuts through a tie, any choice of the tied rows is accepted, and so is the list "
        "of every tied row (FETCH FIRST n ROWS WITH TIES); a pivot is compared with every such choice too.",
        "ties.py",
        (f"{COMPARATOR}::test_a_limit_that_cuts_a_tie_accepts_any_tied_row",),
    ),
    Rule(
        "A failed or truncated result never matches, and an empty result matches only an empty gold.",
        "execution.py",
        ("empty_result", f"{COMPARATOR}::test_empty_gold_matches_only_success_empty"),
    ),
    # numbers
    Rule(
        "Integers match exactly; fractional numbers within the task's relative tolerance, rows paired by a "
        "proper matching; summation noise below 1e-9 is no difference.",
        "matching.py",
        ("one_number_changed", "integers_as_floats", f"{COMPARATOR}::test_noise_floor_and_rates"),
    ),
    Rule(
        "A number in another unit is another number: no conversion is guessed (mg/dL for mmol/L).",
        "matching.py",
        ("unit_not_converted",),
    ),
    Rule("A rate may be written as a fraction or as a percentage.", "matching.py", ("rate_as_percentage",)),
    Rule(
        "A gold written to more decimals than a prediction that has at least one is read at the prediction's "
        "decimals (the question rarely says how to round), where no value becomes 0 and its largest value keeps "
        "two significant figures (12.3 for 12.34, not 0.1 for 0.12); a gold ending in 5 may round either way.",
        "values.py",
        ("rounded_to_2_decimals", "coarse_written_as_2dp"),
    ),
    Rule(
        "A prediction whose query stated its decimals (a numeric's scale: round(x, 1)) is read at them, kept "
        "beside the float, also where its SQL is a gold's own text (0.7 for 0.74 from round(x, 1)).",
        "execution.py",
        (
            "rounded_to_1_by_query",
            f"{VARIANTS}::test_a_prediction_that_is_another_golds_text_keeps_the_decimals_its_query_wrote",
        ),
    ),
    Rule(
        "A gold whose own SQL rounds where no wording asks it to (round(avg(zyts), 1) gives 8.6) is matched by a "
        "finer prediction that rounds to it at those decimals (8.58); a finer value that rounds to another one is "
        "left to the tolerance, and beyond it is wrong.",
        "columns.py",
        (
            "finer_than_a_rounding_gold",
            "finer_rounding_to_another",
            f"{COMPARATOR}::test_a_gold_that_rounds_is_met_by_a_finer_prediction",
        ),
    ),
    # values
    Rule(
        "Booleans as 't', 'f', 'true' or 'false'; text trimmed and NFKC-normalised; NULL equals only NULL.",
        "values.py",
        (f"{COMPARATOR}::test_normalisation",),
    ),
    Rule(
        "A period is one period however written: 'YYYY-MM', 'Jan 2024', '2024年1月', '2020-Q1', a date or "
        "midnight on the 1st, a month or quarter number within the one year the other side's labels name; "
        "another period is another answer.",
        "periods.py",
        ("periods_spelt_out", "period_moved", "tests/grading/test_periods.py::test_period_labels"),
    ),
    Rule(
        "The words beside a period in a label or name say only what was counted (no number, no period of their "
        "own), so a day holds no month ('2018-02-02' names neither '2018-02' nor '2018-02-01'), and a name "
        "that holds one period among such words ('admissions_nov_2024') speaks of that period.",
        "periods.py",
        ("day_moved", f"{PIVOTS}::test_a_period_named_among_other_words"),
    ),
    # totals
    Rule(
        "A summary row (a total or subtotal of the rows it covers) may be added or left out where the gold has none.",
        "summary.py",
        ("total_row", f"{COMPARATOR}::test_summary_rows"),
    ),
    Rule(
        "A label made only of summary words ('Hospital-wide', 'All departments', 合计) is a total and names the "
        "gold's one total row (全院); it names no group, and no row where the gold has two totals.",
        "summary.py",
        (
            "total_labelled_in_words",
            "total_label_on_a_group",
            f"{RELABEL}::test_a_total_label_names_the_golds_total_row",
        ),
    ),
    Rule(
        "A row labelled as a summary in words (合计, 全院, 'Total', 'Hospital-wide') that the question did not ask "
        "for is set aside whatever it holds where the gold cannot check it (a distinct count, a rate, a mean); a "
        "count or sum of a unit that adds up (visits per department) must still be the sum of the rows.",
        "summary.py",
        ("unchecked_total_row", "wrong_total_row", f"{COMPARATOR}::test_summary_rows_the_gold_cannot_check"),
    ),
    Rule(
        "A text on a total row that no other row holds in its column describes the total ('GI + new departments' "
        "beside 合计) and names no group it would subtotal.",
        "summary.py",
        ("described_total_row",),
    ),
    Rule(
        "Readings compose: rows labelled otherwise than the gold labels them (names in English, codes) may carry a "
        "summary row too; it is set aside as above before the labels are read.",
        "execution.py",
        (f"{COMPOSED}::test_relabelled_rows_with_a_summary_row",),
    ),
    # labels
    Rule(
        "Row labels are read as the gold's labels: an entry's code, its name in the other language, the name "
        "decorated with either or written as two names of one entry ('男 male'), a quarter by its first month or "
        "day or, where the gold numbers its year's quarters 1-4, by its name, a year.",
        "relabel.py",
        (
            "labels_decorated",
            "labels_swapped",
            f"{RELABEL}::test_labels_are_read_as_the_golds",
            f"{RELABEL}::test_quarters_numbered_by_the_gold",
        ),
    ),
    Rule(
        "A row of a group the gold does not list, with every number 0 or NULL, is neutral unless the gold is a "
        "top N; a row of labels with no number is never neutral (a list with an extra name has an extra row).",
        "relabel.py",
        ("zero_row_added", "name_added", f"{RELABEL}::test_a_top_n_keeps_its_n"),
    ),
    # layouts
    Rule(
        "The long form of a wide gold, or the wide form of a long one, is the same answer where labels name the "
        "outputs (column names, output meanings, dictionary codes and names, periods); a long form may carry "
        "other numbers per cell (the count beside each asked mean).",
        "pivot.py",
        ("long_form_zh", "long_form_en", "long_form_column_names", "wide_form"),
    ),
    Rule(
        "Rows of classes and a count may be answered as one wide row, a column per class headed by its label; a "
        "total column beside them is an extra column.",
        "pivot.py",
        ("wide_row_with_total", "wide_row_count_changed"),
    ),
    Rule(
        "In a cross (labels in rows and in headers), the header holding more of a column's words names it, and "
        "a header it outdid names the label's one fact left.",
        "cross.py",
        (f"{PIVOTS}::test_cross_of_visit_types_and_months", f"{PIVOTS}::test_a_cross_keyed_by_department"),
    ),
    Rule(
        "A comparison of two periods may be answered as a period series (one row per period under one column of "
        "the measure's kind), as rows labelled by the two periods, or as one wide row (prev_X, cur_X beside the "
        "period it is of): measures are found by their values, rows by their periods.",
        "series.py",
        ("period_series", "period_series_in_words", "period_rows_by_role", "period_rows_swapped"),
    ),
    Rule(
        "A comparison of two runs of whole years may be answered as rows labelled by the years each covers "
        "('2018-2020', '2018–2020', '2018至2020', '2018年-2020年'), the earlier run the previous period.",
        "series.py",
        (
            "period_rows_by_year_ranges",
            "period_ranges_swapped",
            f"{PIVOTS}::test_a_comparison_of_runs_of_years_answered_as_rows_labelled_by_them",
        ),
    ),
)

ACCEPTANCE: tuple[Reading, ...] = (
    Reading("as laid out", "match", "columns by assignment, rows as a bag (or in order), numbers and values"),
    Reading(
        "without its summary rows",
        "without_summary_rows",
        "where it has more rows than the gold and the gold has no summary row",
    ),
    Reading(
        "relabelled",
        "relabelled",
        "its label columns written in the gold's labels, neutral rows left out; then both readings above",
    ),
    Reading(
        "in another layout",
        "relayouts",
        "long and wide forms, crosses, period series and period rows; tried after the readings above",
    ),
)


def render_markdown() -> str:
    """Both tables as docs/scoring.md shows them."""
    lines = [
        "| # | A prediction is read against each acceptable gold | by | when |",
        "|---|---|---|---|",
        *(f"| {k} | {r.name} | `{r.function}` | {r.what} |" for k, r in enumerate(ACCEPTANCE, 1)),
        "",
        "| Rule | Module | Proved by |",
        "|---|---|---|",
    ]
    for rule in RULES:
        proofs = ", ".join(f"`{p.split('::')[-1]}`" for p in rule.proofs)
        lines.append(f"| {rule.principle} | `{rule.module}` | {proofs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m evalpkg.grading.rules: the tables for docs/scoring.md
    print(render_markdown(), end="")
