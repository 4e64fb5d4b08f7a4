"""The task schema: what a benchmark task is, as stored in tasks/<version>/tasks/*.json."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# 2: a task may declare its outputs and what each question variant asks for; format 1 files still load.
TASK_FORMAT_VERSION: Final = 2


class TaskType(StrEnum):
    """The seven task types of seed 000 §2.1, most frequent first."""

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
    """One user turn: the first is the question itself; later ones are follow-ups."""

    user: dict[Language, str] | None = None  # None for turn 0 (the question variants)
    expected_tool_calls: list[ExpectedToolCall]


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
    format_version: Literal[1, 2] = 1  # TASK_FORMAT_VERSION (2) where the task declares outputs
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
        return self

    def variant(self, language: Language, complexity: Complexity) -> QuestionVariant:
        for v in self.variants:
            if v.language is language and v.complexity is complexity:
                return v
        raise KeyError((language, complexity))

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
