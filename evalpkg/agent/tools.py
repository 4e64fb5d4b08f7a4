"""The EMR toolkit: one typed class whose `@tool` methods are the tools (their schemas come from the
signatures, function_schema.py); `call` dispatches, and every call returns a ToolResult: no exception
leaves it."""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from evalpkg.agent import paging
from evalpkg.agent.cache import ToolCache
from evalpkg.agent.claims import check_claim
from evalpkg.agent.clarify import ask_next
from evalpkg.agent.function_schema import arg_model, is_tool, tool, tools_of
from evalpkg.agent.schema import Catalog, SchemaIndex
from evalpkg.agent.state import QueryState, asked, merge
from evalpkg.agent.user_sim import Clinician
from evalpkg.errors import EvalpkgError
from evalpkg.sql import fingerprint
from evalpkg.sql.executor import QueryFailed, QueryResult, ReadOnlyExecutor
from evalpkg.sql.guard import SqlRefused, check
from evalpkg.testset.models import Language


class ToolResult(BaseModel):
    name: str
    ok: bool
    content: dict[str, Any] = {}
    error: str | None = None
    cached: bool = False
    elapsed_ms: float = 0.0
    sql: str | None = None  # the SQL this call ran (execute_sql, or the SQL a submitted plan compiled to)

    def text(self) -> str:
        """What the model reads."""
        body = self.content if self.ok else {"error": self.error}
        return json.dumps(body, ensure_ascii=False, default=str)


class ToolError(EvalpkgError):
    """A failure the model should read and can recover from."""


@dataclass
class ToolOptions:
    """Every guard and helper can be switched off for ablations."""

    time_confirmation: bool = True
    supplementary_schema: bool = True
    schema_hint: bool = True
    schema_retrieval: bool = True
    cache: bool = True


class RanSql(dict[str, Any]):
    """The content of a tool that ran SQL (what the model reads), with the SQL that ran and whether its
    result came from the run's cache: they become ToolResult.sql and ToolResult.cached."""

    def __init__(self, content: dict[str, Any], *, sql: str, cached: bool) -> None:
        super().__init__(content)
        self.sql, self.cached = sql, cached


@dataclass
class Shared:
    """Per-run objects shared by every worker."""

    catalog: Catalog
    index: SchemaIndex
    cache: ToolCache
    dictionary: list[dict[str, str]]
    examples: list[dict[str, str]]


@dataclass
class Toolkit:
    shared: Shared
    executor: ReadOnlyExecutor
    question: str = ""
    user: Clinician | None = None
    options: ToolOptions = field(default_factory=ToolOptions)
    loaded_tables: set[str] = field(default_factory=set)
    confirmed_time_tables: set[str] = field(default_factory=set)
    results: dict[str, QueryResult] = field(default_factory=dict)
    last_result: dict[str, Any] | None = None
    tool_names: tuple[str, ...] = ()  # default: the emr toolset
    state: QueryState = field(default_factory=QueryState)
    turn: int = 0
    language: Language = Language.zh  # the dialogue's: what the state-driven questions are asked in

    def __post_init__(self) -> None:
        self.tool_names = self.tool_names or TOOL_NAMES

    # ---- tools -------------------------------------------------------------------------------

    @tool("emr")
    def query_schema(self, table_name: str | None = None) -> dict[str, Any]:
        """Show the database tables, or the full column list of one table.

        Args:
            table_name: a table such as t_lab_result; omit to list all tables.
        """
        cat = self.shared.catalog
        if not table_name:
            out: dict[str, Any] = {"tables": cat.overview()}
            if self.options.schema_retrieval and self.question:
                # two-stage retrieval: candidate tables for the question, then their full schema
                candidates = self.shared.index.candidate_tables(self.question)
                self.loaded_tables.update(candidates)
                out["candidate_schemas"] = {t: cat.table_text(t) for t in candidates}
            return out
        table = cat.resolve(table_name)
        if table is None:
            raise ToolError(f"unknown table {table_name!r}; call query_schema() without arguments to list tables")
        self.loaded_tables.add(table)
        out = {"schema": cat.table_text(table)}
        if self.options.schema_hint and self.question:
            hint = self.shared.index.hint(self.question, table)
            if hint:
                out["hint"] = f"likely target columns for this question: {', '.join(hint)}"
        return out

    @tool("emr", "plan")
    def query_dictionary(self, term: str) -> dict[str, Any]:
        """Look up columns, codes, units, NULL meaning and time semantics in the data dictionary.

        Args:
            term: a word or code, e.g. 糖化血红蛋白, HbA1c, cyrq, 作废.
        """
        t = term.strip().lower()
        if not t:
            raise ToolError("term is empty")
        hits = [row for row in self.shared.dictionary if any(t in (v or "").lower() for v in row.values())]
        return {"matches": hits[:20], "total": len(hits)}

    @tool("emr")
    def search_sql_examples(self, question: str) -> dict[str, Any]:
        """Find example questions with the SQL that answered them, most similar first.

        Args:
            question: the question in your own words.
        """
        scored = []
        q = set(question.lower())
        for ex in self.shared.examples:
            text = (ex["question"] + " " + (ex.get("question_en") or "")).lower()
            scored.append((len(q & set(text)) / (1 + len(q)), ex))
        scored.sort(key=lambda s: -s[0])
        return {"examples": [ex for _, ex in scored[:3]]}

    @tool("emr")
    def execute_sql(self, sql: str, require_timefield_confirmation: bool = False) -> dict[str, Any]:
        """Run one read-only SELECT on the eval database. Results over 200 rows come back paged with
        the total row count and a per-column summary.

        Args:
            sql: exactly one SELECT statement (tables live in schemas emr and meta).
            require_timefield_confirmation: if true, a time-filtered query first returns the time
                columns of its tables and their meaning; call again to run it.
        """
        tree = check(sql)  # parsed once for the guard and the tables; the result cache is keyed by the text
        used = [t for t in (self.shared.catalog.resolve(x) for x in fingerprint.tables_in(tree)) if t]
        out: dict[str, Any] = {}
        if require_timefield_confirmation and self.options.time_confirmation:
            pending = [
                t
                for t in used
                if self.shared.catalog.time_columns(t)
                and t not in self.confirmed_time_tables
                and _filters_on_time(sql, self.shared.catalog, t)
            ]
            if pending:
                self.confirmed_time_tables.update(pending)
                return {
                    "needs_confirmation": True,
                    "time_columns": {
                        t: [f"{c.name}: {c.time_semantics or c.meaning}" for c in self.shared.catalog.time_columns(t)]
                        for t in pending
                    },
                    "next": "check the time column, then call execute_sql again",
                }
        unloaded = [t for t in used if t not in self.loaded_tables]
        if unloaded and self.options.supplementary_schema:
            out["supplementary_schema"] = {t: self.shared.catalog.table_text(t) for t in unloaded}
            self.loaded_tables.update(unloaded)
        result, cached = self._run(sql)
        rid = uuid.uuid4().hex[:8]
        self.results[rid] = result
        out.update(paging.page(result, rid, 0))
        self.last_result = {
            "columns": result.columns,
            "rows": result.rows[: paging.PAGE_ROWS],
            "total_rows": paging.total_rows(result),
        }
        return RanSql(out, sql=sql, cached=cached)

    @tool("emr", "plan")
    def fetch_page(self, result_id: str, page: int) -> dict[str, Any]:
        """Fetch another page (200 rows) of an earlier execute_sql result.

        Args:
            result_id: the result_id execute_sql returned.
            page: page number, starting at 0.
        """
        result = self.results.get(result_id)
        if result is None:
            raise ToolError(f"no result {result_id!r} in this dialogue")
        if page < 0 or page * paging.PAGE_ROWS >= max(len(result.rows), 1):
            raise ToolError(f"page {page} is out of range (0..{paging.last_page(result)})")
        return paging.page(result, result_id, page)

    @tool("emr")
    def validate_result(self, claim: str, evidence: str | None = None) -> dict[str, Any]:
        """Check that the numbers and entities in your conclusion are supported by the evidence.

        Args:
            claim: the sentence you intend to tell the clinician.
            evidence: JSON of the result you rely on; omit to use the last execute_sql result.
        """
        if evidence:
            try:
                ev: Any = json.loads(evidence)
            except json.JSONDecodeError:
                ev = evidence
        elif self.last_result is not None:
            ev = self.last_result
        else:
            raise ToolError("no evidence: run execute_sql first or pass evidence")
        names = [d.get("meaning", "") for d in self.shared.dictionary if d.get("table_name") == "dict_dept"]
        return check_claim(claim, ev, known_entities=[n for n in names if n])

    @tool("emr", "plan")
    def ask_clarify(self, question: str) -> dict[str, Any]:
        """Ask the clinician a clarifying question when the request is ambiguous.

        Args:
            question: one short question to the clinician.
        """
        if self.user is None:
            raise ToolError("no clinician is available in this run; make a reasonable assumption and say it")
        if self.tracks_state:
            return self._ask_from_state()
        self.state = asked(self.state, question)
        self.turn += 1
        return {"answer": self.user.answer(question)}

    @property
    def tracks_state(self) -> bool:
        """The state toolset: the dialogue state is kept, recorded per step and drives ask_clarify."""
        return STATE_TOOL in self.tool_names

    def _ask_from_state(self) -> dict[str, Any]:
        """Code asks about the first missing slot, whatever the model wrote (clarify.py)."""
        assert self.user is not None
        done = ask_next(self.state, self.user, self.language, self.turn + 1)
        if done is None:
            raise ToolError("the dialogue state has every slot it needs (missing_slots is empty): run the query")
        self.turn += 1
        self.state = done.state
        return {
            "asked": done.question,
            "about": done.slot,
            "answer": done.answer,
            "missing_slots": self.state.missing_slots,
            "next_action": self.state.next_action(),
        }

    @tool("state")
    def update_state(
        self,
        intent: str | None = None,
        metric: str | None = None,
        population: str | None = None,
        time_range: str | None = None,
        time_column: str | None = None,
        department: str | None = None,
        unit: str | None = None,
        threshold: str | None = None,
        open_slots: list[str] | None = None,
        confidence: float = 0.8,
    ) -> dict[str, Any]:
        """Record what you understood of the request so far; the merged state says what is still
        missing and whether to ask the clinician or to query. While a slot is missing, ask_clarify asks
        the clinician about the first missing one (whatever its question says) and merges the reply.

        Args:
            intent: e.g. count patients, average, trend, compare.
            metric: what is measured, e.g. HbA1c > 7%, discharges, length of stay.
            population: who, e.g. type 2 diabetics, inpatients aged 65+.
            time_range: e.g. 2023 Q4, last 3 months.
            time_column: which time, e.g. discharge time cyrq, sample time cysj.
            department: a department name or code.
            unit: e.g. mmol/L.
            threshold: e.g. > 7.0.
            open_slots: slots the request needs but leaves open, e.g. ["department"] for "our department".
            confidence: how sure you are of these values, 0 to 1.
        """
        if not 0 <= confidence <= 1:
            raise ToolError("confidence must be between 0 and 1")
        proposal = {
            "intent": intent,
            "metric": metric,
            "population": population,
            "time_range": time_range,
            "time_column": time_column,
            "department": department,
            "unit": unit,
            "threshold": threshold,
        }
        try:
            self.state = merge(self.state, proposal, self.turn, confidence, open_slots or ())
        except ValueError as exc:  # an unknown slot name among open_slots
            raise ToolError(str(exc)) from None
        return {
            "state": {k: v.current for k, v in self.state.slots.items() if v.current},
            "missing_slots": self.state.missing_slots,
            "next_action": self.state.next_action(),
        }

    # ---- dispatch ----------------------------------------------------------------------------

    def _run(self, sql: str) -> tuple[QueryResult, bool]:
        """The result and whether it came from the run's cache."""
        # whitespace-normalized text: cheap, and literals keep their case
        key = " ".join(sql.split()).rstrip(";") if self.options.cache else None
        if key is not None:
            hit = self.shared.cache.get("execute_sql", key)
            if hit is not None:
                return hit, True
        result = self.executor.run(sql, checked=True)
        if key is not None:
            self.shared.cache.put("execute_sql", key, result)
        return result, False

    def call(self, name: str, arguments: dict[str, Any] | str | None) -> ToolResult:
        t0 = time.perf_counter()
        try:
            if name not in self.tool_names or not is_tool(type(self), name):
                raise ToolError(f"unknown tool {name!r}; available: {', '.join(self.tool_names)}")
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
            if not isinstance(args, dict):
                raise ToolError("arguments must be a JSON object")
            params = arg_model(type(self), name).model_validate(args).model_dump(exclude_unset=True)
            cacheable = self.options.cache and name in ("query_dictionary", "search_sql_examples")
            content = self.shared.cache.get(name, params) if cacheable else None
            cached = content is not None
            if content is None:
                content = getattr(self, name)(**params)
                cached = isinstance(content, RanSql) and content.cached
                if cacheable:
                    self.shared.cache.put(name, params, content)
            return ToolResult(
                name=name,
                ok=True,
                content=content,
                cached=cached,
                elapsed_ms=(time.perf_counter() - t0) * 1000,
                sql=content.sql if isinstance(content, RanSql) else None,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            message = f"bad arguments: {'.'.join(map(str, err['loc'])) or '(all)'}: {err['msg']}"
        except json.JSONDecodeError as exc:
            message = f"arguments are not valid JSON: {exc.msg}"
        except SqlRefused as exc:
            message = f"refused: {exc}"
        except (ToolError, QueryFailed) as exc:
            message = str(exc)
        except Exception as exc:  # a tool bug must not end the run; it is recorded
            message = f"internal tool error: {type(exc).__name__}: {str(exc)[:200]}"
        return ToolResult(name=name, ok=False, error=message, elapsed_ms=(time.perf_counter() - t0) * 1000)


def _filters_on_time(sql: str, catalog: Catalog, table: str) -> bool:
    where = re.split(r"\bwhere\b", sql, maxsplit=1, flags=re.IGNORECASE)
    return len(where) == 2 and any(re.search(rf"\b{c.name}\b", where[1]) for c in catalog.time_columns(table))


TOOL_NAMES = tools_of(Toolkit, "emr")
STATE_TOOL = "update_state"  # added by toolset emr-v1+state
