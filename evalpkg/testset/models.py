"""The task schema: what a benchmark task is, as stored in tasks/<version>/tasks/*.json."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# 2: a task may declare its outputs and what each question variant asks for; 3: a follow-up turn may carry
# its own gold (graded on its own), and a task may state its premise; 4: a question variant may name the golds
# its wording admits (graded against those only); format 1 to 3 files still load.
TASK_FORMAT_VERSION: Final = 4
OUTPUTS_FORMAT: Final = 2  # the first format where a task declares its outputs
TURN_GOLDS_FORMAT: Final = 3  # the first format where a follow-up carries its own gold or a task its premise
ADMITS_FORMAT: Final = 4  # the first format where a question variant names the golds it admits
# How a task's notes say that its list (a top N, the groups that pass a threshold) may hold fewer rows.
FEWER_ROWS_EXPECTED: Final = re.compile(r"fewer rows (than the limit )?(are |is )?expected", re.IGNORECASE)


class TaskType(StrEnum):
    """The seven task types, most frequent first (docs/testset.md)."""

    single_table = "single_table"  # 单表筛选
    join_aggregate = "join_aggregate"  # 跨表关联聚合
    time_series = "time_series"  # 时间序列查询
    negation = "negation"  # 否定条件查询
    unit_conversion = "unit_conversion"  # 单位换算查询
    clarification = "clarification"  # 多轮澄清查询
    anomaly = "anomaly"  # 异常解释查询


class Difficulty(StrEnum):
    easy = "easy"
    medium = "medium"
    hard = "hard"


class Language(StrEnum):
    zh = "zh"
    en = "en"


class Complexity(StrEnum):
    """How a clinician might phrase the same need: terse and colloquial ... fully specified."""

    colloquial = "colloquial"
    plain = "plain"
    technical = "technical"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuestionVariant(Strict):
    language: Language
    complexity: Complexity
    text: Annotated[str, Field(min_length=4)]
    asks: list[str] = []  # names of the task's outputs this wording asks for; empty: all of them
    # indices into the task's gold_sql (turn 0's) of the readings this wording admits (a technical wording that
    # names one reading: "orders started (kssj) in 2023"); empty: every gold
    admits: list[int] = []


class Output(Strict):
    """One thing a task's answer consists of: a column of the gold result, and what it means."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]
    meaning: dict[Language, str]
    column: Annotated[str, Field(min_length=1)]  # the gold result column that carries it


class ArgConstraint(Strict):
    """A check on one argument of an expected tool call."""

    contains_all: list[str] = []  # case-insensitive substrings that must all appear
    contains_any: list[str] = []  # at least one must appear
    equals: str | None = None


class ExpectedToolCall(Strict):
    name: str
    args: dict[str, ArgConstraint] = {}
    required: bool = True  # False: fine to call, not penalised if missing
    after: list[str] = []  # names of calls that must come earlier (partial order)


class Turn(Strict):
    """One user turn: the first is the question itself; later ones are follow-ups. A follow-up with its
    own gold (format 3) is a new question building on the previous answer, graded on its own; one
    without (a clarification's answer) refines the question before it."""

    user: dict[Language, str] | None = None  # None for turn 0 (the question variants)
    expected_tool_calls: list[ExpectedToolCall]
    gold_sql: list[str] = []  # any one is acceptable; empty: turn 0 (the task's gold) or not graded apart
    outputs: list[Output] = []  # as Task.outputs, for this turn's gold
    answer_points: list[AnswerPoint] = []  # rows and cols of this turn's gold result
    result: ResultSpec | None = None  # None: the task's


class ResultSpec(Strict):
    order_matters: bool = False  # only when the gold orders its output
    numeric_tolerance: float = Field(default=1e-6, ge=0)  # relative
    unit: str | None = None
    empty_expected: bool = False


class AnswerPoint(Strict):
    kind: Literal["number", "entity", "text"]
    # number: a numeric cell of the gold result (row, col); entity: a named cell (a department, a
    # diagnosis) the answer must name; text: the idea in both languages
    row: int | None = None
    col: int | None = None
    tolerance: float = Field(default=0.01, ge=0)
    text: dict[Language, str] | None = None

    @model_validator(mode="after")
    def _shape(self) -> AnswerPoint:
        if self.kind in ("number", "entity") and (self.row is None or self.col is None):
            raise ValueError(f"a {self.kind} answer point needs row and col of the gold result")
        if self.kind == "text" and not self.text:
            raise ValueError("a text answer point needs text in zh and en")
        return self


class Premise(Strict):
    """What a question asserts about the data, stated as a criterion the gold result must meet in every
    world ("changed substantially": at least 25% and at least 10 visits). A choice of parameters that
    fails it is not used; validate checks it on released tasks."""

    # change: two periods of one measure differ by at least the stated amounts; none: the question is
    # worded so that it asserts nothing about the data ("how did X compare with last month?")
    kind: Literal["change", "none"]
    # the measure: a stem of prev_/this_ (or _prev/_this) gold columns, "*" every pair summed; with
    # rows "series" a plain column read on the first and the last row
    measure: str = ""
    rows: Literal["sum", "first", "series"] = "sum"  # summed over the rows; the first (a total row); series
    direction: Literal["any", "down", "up"] = "any"  # "dropped": down
    min_relative: float = Field(default=0, ge=0)  # |later - earlier| / earlier, 0.25 = 25%
    min_absolute: float = Field(default=0, ge=0)  # |later - earlier|, in the measure's unit
    unit: str = ""  # the measure's unit, for the findings ("visits", "days", "percentage points")
    # the measure counts events (visits, admissions): the change must also lie beyond chance
    # (premises.CHANCE_SIGMAS), so a premise is not decided by a handful of visits
    counts_events: bool = False

    @model_validator(mode="after")
    def _change_names_its_measure(self) -> Premise:
        if self.kind == "change" and not self.measure:
            raise ValueError("a change premise names its measure")
        return self

    def describe(self) -> str:
        if self.kind == "none":
            return "nothing about the data"
        what = "the total of every prev/this pair" if self.measure == "*" else self.measure
        kind = {"any": "a change", "down": "a fall", "up": "a rise"}[self.direction]
        parts = [f"{kind} of {what}"]
        if self.min_relative:
            parts.append(f"at least {self.min_relative:.0%}")
        if self.min_absolute:
            parts.append(f"at least {self.min_absolute:g} {self.unit}".rstrip())
        if self.counts_events:
            parts.append("beyond chance")
        return ", ".join(parts)


class HiddenSlot(Strict):
    """What the clinician meant but did not say; the simulated user reveals it when asked."""

    slot: Literal["metric", "population", "time_range", "time_column", "department", "unit", "threshold"]
    value: str
    keywords: list[str]  # words in a clarifying question that ask about this slot (zh and en)
    answer: dict[Language, str]


class Annotator(Strict):
    role: Literal["clinician", "analyst", "dba", "generator"]
    id: str


class Review(Strict):
    annotators: list[Annotator]
    agreement: Annotated[float, Field(ge=0, le=1)]  # share of fields both annotators set alike
    arbitration: str | None = None  # who decided and why, when they disagreed
    status: Literal["approved", "rejected", "pending"] = "approved"


class Provenance(Strict):
    source: Literal["template", "ticket"]
    template_id: str | None = None
    ticket_id: int | None = None
    params: dict[str, str] = {}
    generator_version: str


Tag = Literal[
    "time_semantics",
    "null_semantics",
    "unit",
    "soft_delete",
    "dictionary_code",
    "ambiguous",
    "unanswerable",
    "ratio",
    "ranking",
    "trend",
    "multi_table",
]


class Task(Strict):
    # 2 where the task declares outputs, 3 where a follow-up has its gold, 4 where a variant names the golds it admits
    format_version: Literal[1, 2, 3, 4] = 1
    id: Annotated[str, Field(pattern=r"^[a-z]{2,4}-[a-z0-9_]+-\d{3}$")]
    type: TaskType
    difficulty: Difficulty
    variants: list[QuestionVariant]
    turns: list[Turn]
    gold_sql: list[str]  # any one is acceptable; empty only when the task is unanswerable
    outputs: list[Output] = []  # empty: every gold column is graded, whatever the variant
    answerable: bool = True
    result: ResultSpec = ResultSpec()
    answer_points: list[AnswerPoint] = []
    hidden_slots: list[HiddenSlot] = []
    tags: list[Tag] = []
    tables: list[str]  # eval tables the gold SQL reads (for difficulty and schema retrieval)
    provenance: Provenance
    review: Review
    maintenance_notes: str = ""
    premise: Premise | None = None  # what the question asserts about the data (anomaly questions)

    @model_validator(mode="after")
    def _consistent(self) -> Task:
        langs = {v.language for v in self.variants}
        if langs != {Language.zh, Language.en}:
            raise ValueError("variants must include both zh and en")
        for lang in langs:
            levels = {v.complexity for v in self.variants if v.language == lang}
            if len(levels) < 3:
                raise ValueError(f"{lang} variants need all three complexities")
        if self.answerable != bool(self.gold_sql):
            raise ValueError("gold_sql must be empty exactly when the task is unanswerable")
        if (self.type is TaskType.clarification) != bool(self.hidden_slots):
            raise ValueError("hidden_slots are required for, and only for, clarification tasks")
        if not self.turns or self.turns[0].user is not None:
            raise ValueError("turn 0 is the question itself (user: null)")
        if self.format_version == 1 and (self.outputs or any(v.asks for v in self.variants)):
            raise ValueError("outputs and variant asks need format_version 2")
        if self.premise is not None and self.format_version < TURN_GOLDS_FORMAT:
            raise ValueError(f"a stated premise needs format_version {TURN_GOLDS_FORMAT}")
        if self.turns[0].gold_sql or self.turns[0].outputs or self.turns[0].answer_points or self.turns[0].result:
            raise ValueError("turn 0 is graded on the task's gold: its own gold_sql, outputs, answer_points stay empty")
        graded = [i for i, t in enumerate(self.turns) if t.gold_sql]
        if graded and self.format_version < TURN_GOLDS_FORMAT:
            raise ValueError(f"turn {graded[0]} carries its own gold: that needs format_version {TURN_GOLDS_FORMAT}")
        for i, t in enumerate(self.turns[1:], 1):
            if not t.gold_sql and (t.outputs or t.answer_points or t.result):
                raise ValueError(f"turn {i} has outputs, answer points or a result spec but no gold_sql")
        self._check_admits()
        return self

    def _check_admits(self) -> None:
        """Each variant's admits name distinct golds of turn 0 (and need a format that knows the field)."""
        for v in self.variants:
            if not v.admits:
                continue
            where = f"variant {v.language.value}/{v.complexity.value}"
            if not self.gold_sql:
                raise ValueError(f"{where} admits golds, but the task is unanswerable: it has none")
            for i in v.admits:
                if not 0 <= i < len(self.gold_sql):
                    raise ValueError(
                        f"{where} admits gold {i}, but its golds are numbered 0 to {len(self.gold_sql) - 1}"
                    )
            if len(set(v.admits)) < len(v.admits):
                twice = next(i for i in v.admits if v.admits.count(i) > 1)
                raise ValueError(f"{where} admits gold {twice} twice")
            if self.format_version < ADMITS_FORMAT:
                raise ValueError(f"{where} names the golds it admits: that needs format_version {ADMITS_FORMAT}")

    def delivered_turns(self) -> list[int]:
        """The turns the simulated clinician delivers as user messages: 0 (the question), each follow-up
        with its own gold, and, in a task without hidden slots, every later one (a clarification's
        answer is the clinician's reply to ask_clarify instead)."""
        return [
            0,
            *(i for i, t in enumerate(self.turns) if i and t.user and (t.gold_sql or not self.hidden_slots)),
        ]

    def followups(self, language: Language) -> tuple[str, ...]:
        """The follow-up messages, in order (delivered_turns after the question)."""
        return tuple(user[language] for i in self.delivered_turns()[1:] if (user := self.turns[i].user))

    def graded_turns(self) -> list[int]:
        """The turns graded on their own: 0 (on the task's gold) and each follow-up with its own gold."""
        return [0, *(i for i, t in enumerate(self.turns) if i and t.gold_sql)]

    def turn_task(self, index: int) -> Task:
        """Turn `index` as a task of its own (its gold, outputs, points and result spec; the wordings ask
        for all its outputs), for the graders that take a task; turn 0 is the task itself."""
        if index == 0:
            return self
        turn = self.turns[index]
        return self.model_copy(
            update={
                "gold_sql": turn.gold_sql,
                "outputs": turn.outputs,
                "answer_points": turn.answer_points,
                "result": turn.result or self.result,
                # a wording's asks and admits name turn 0's outputs and golds
                "variants": [v.model_copy(update={"asks": [], "admits": []}) for v in self.variants],
                "turns": [Turn(expected_tool_calls=turn.expected_tool_calls)],
                "hidden_slots": [],
                "answerable": True,
            }
        )

    def fewer_rows_expected(self) -> bool:
        """The result is a list whose length the data decides (result.empty_expected, or the notes say
        fewer rows are expected): on another snapshot it may hold fewer rows, none at all included."""
        return self.result.empty_expected or bool(FEWER_ROWS_EXPECTED.search(self.maintenance_notes))

    def variant(self, language: Language, complexity: Complexity) -> QuestionVariant:
        for v in self.variants:
            if v.language is language and v.complexity is complexity:
                return v
        raise KeyError((language, complexity))

    def graded_for(self, language: str, complexity: str) -> Task:
        """The task as an instance of this wording is graded on turn 0: only the golds the wording admits, in
        the task's order; the task itself where it admits every gold, or no variant has that wording. The
        copy's wordings admit all of its golds (it is graded for this wording alone); follow-up turns keep
        every gold of theirs (a wording names only turn 0's)."""
        variant = next((v for v in self.variants if v.language == language and v.complexity == complexity), None)
        if variant is None or not variant.admits:
            return self
        return self.model_copy(
            update={
                "gold_sql": [sql for i, sql in enumerate(self.gold_sql) if i in variant.admits],
                "variants": [v.model_copy(update={"admits": []}) for v in self.variants],
            }
        )

    def question(self, language: Language, complexity: Complexity) -> str:
        return self.variant(language, complexity).text

    def asked(self, variant: QuestionVariant) -> list[Output]:
        """The outputs a variant asks for: those it names (unknown names ignored), else every one."""
        by_name = {o.name: o for o in self.outputs}
        return [by_name[n] for n in variant.asks if n in by_name] if variant.asks else list(self.outputs)

    def graded_columns(self, language: Language, complexity: Complexity) -> list[str] | None:
        """The gold columns a variant is graded on; None: every gold column (no outputs declared, or the
        variant names none that exists)."""
        columns = [o.column for o in self.asked(self.variant(language, complexity))]
        return columns or None
