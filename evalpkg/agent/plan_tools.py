"""Toolset of the plan strategy: catalog functions over pg_catalog and
submit_plan, whose plan a deterministic compiler turns into SQL."""

from __future__ import annotations

from typing import Any

from evalpkg.agent.function_schema import tool, tools_of
from evalpkg.agent.plan import Plan, PlanError, compile_plan
from evalpkg.agent.tools import ToolError, Toolkit


class PlanToolkit(Toolkit):
    """Stateless catalog lookups; every one is a single query on pg_catalog/pg_stats."""

    def _catalog_query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.executor.query(sql, params)

    def _table(self, name: str) -> tuple[str, str]:
        table = self.shared.catalog.resolve(name)
        if table is None:
            raise ToolError(f"unknown table {name!r}; call list_all_tables()")
        schema, bare = self.shared.catalog.tables[table].split(".")
        return schema, bare

    @tool("plan")
    def list_all_tables(self) -> dict[str, Any]:
        """List the tables agents can query, with a one-line description each."""
        return {"tables": {t: self.shared.catalog.descriptions.get(t, "") for t in sorted(self.shared.catalog.tables)}}

    @tool("plan")
    def get_table_columns(self, table_name: str) -> dict[str, Any]:
        """Columns of a table: name, type, meaning, and whether an index covers it.

        Args:
            table_name: e.g. t_lab_result.
        """
        _, table = self._table(table_name)
        indexed = {c for index in self.shared.catalog.indexes.get(table, []) for c in index.columns}
        self.loaded_tables.add(table)
        return {
            "columns": [
                {"name": c.name, "type": c.type, "meaning": c.meaning or c.meaning_en, "indexed": c.name in indexed}
                for c in self.shared.catalog.columns[table]
            ]
        }

    @tool("plan")
    def get_table_row_count(self, table_name: str) -> dict[str, Any]:
        """Estimated row count from the planner statistics (pg_class.reltuples).

        Args:
            table_name: e.g. t_zy_visit.
        """
        schema, table = self._table(table_name)
        rows = self._catalog_query(
            "select greatest(reltuples, 0)::bigint from pg_class where oid = (%s || '.' || %s)::regclass",
            (schema, table),
        )
        return {"table": table, "rows": int(rows[0][0]) if rows else 0}

    def _ndv(self, schema: str, table: str, column: str) -> float:
        rows = self._catalog_query(
            "select s.n_distinct, greatest(c.reltuples, 1) from pg_stats s join pg_class c "
            "on c.oid = (s.schemaname || '.' || s.tablename)::regclass "
            "where s.schemaname = %s and s.tablename = %s and s.attname = %s",
            (schema, table, column),
        )
        if not rows:
            raise ToolError(f"no statistics for {table}.{column} (unknown column, or the table was never analyzed)")
        n_distinct, reltuples = float(rows[0][0]), float(rows[0][1])
        return -n_distinct * reltuples if n_distinct < 0 else n_distinct

    @tool("plan")
    def get_column_ndv(self, table_name: str, column: str) -> dict[str, Any]:
        """Estimated number of distinct values of a column (pg_stats.n_distinct).

        Args:
            table_name: e.g. t_lab_result.
            column: e.g. xmdm.
        """
        schema, table = self._table(table_name)
        return {"table": table, "column": column, "ndv": round(self._ndv(schema, table, column))}

    @tool("plan")
    def estimate_join_selectivity(self, left_column: str, right_column: str) -> dict[str, Any]:
        """Selectivity of an equi-join, 1 / max(NDV): the share of row pairs that match.

        Args:
            left_column: table.column, e.g. t_zy_visit.visit_id.
            right_column: table.column, e.g. t_lab_result.visit_id.
        """
        ndvs = []
        for ref in (left_column, right_column):
            if "." not in ref:
                raise ToolError(f"write columns as table.column, got {ref!r}")
            t, c = ref.split(".", 1)
            schema, table = self._table(t)
            ndvs.append(self._ndv(schema, table, c))
        return {"selectivity": 1.0 / max(max(ndvs), 1.0), "ndv": ndvs}

    @tool("plan")
    def suggest_optimal_join_order(self, tables: list[str]) -> dict[str, Any]:
        """Join order for the given tables: smallest first (greedy by estimated rows).

        Args:
            tables: table names, e.g. ["t_lab_result", "t_zy_visit"].
        """
        counts = {t: self.get_table_row_count(t)["rows"] for t in tables}
        return {"order": sorted(counts, key=lambda t: counts[t]), "rows": counts}

    @tool("plan")
    def check_index_exists(self, table_name: str, columns: list[str]) -> dict[str, Any]:
        """Whether one index covers these columns as its leading columns.

        Args:
            table_name: e.g. t_lab_result.
            columns: e.g. ["visit_id"].
        """
        _, table = self._table(table_name)
        exists = any(index.leads_with(columns) for index in self.shared.catalog.indexes.get(table, []))
        return {"table": table, "columns": columns, "exists": exists}

    @tool("plan")
    def get_table_comment(self, table_name: str) -> dict[str, Any]:
        """What a table holds.

        Args:
            table_name: e.g. t_med_order.
        """
        schema, table = self._table(table_name)
        comment = self._catalog_query(
            "select obj_description((%s || '.' || %s)::regclass, 'pg_class')", (schema, table)
        )
        return {
            "table": table,
            "comment": (comment[0][0] if comment and comment[0][0] else None)
            or self.shared.catalog.descriptions.get(table, ""),
        }

    @tool("plan")
    def get_column_statistics(self, table_name: str, column: str) -> dict[str, Any]:
        """NULL share, distinct values, most common values and range of a column (pg_stats).

        Args:
            table_name: e.g. t_lab_result.
            column: e.g. unit.
        """
        schema, table = self._table(table_name)
        rows = self._catalog_query(
            "select null_frac, n_distinct, most_common_vals::text, histogram_bounds::text from pg_stats "
            "where schemaname = %s and tablename = %s and attname = %s",
            (schema, table, column),
        )
        if not rows:
            raise ToolError(f"no statistics for {table}.{column}")
        null_frac, ndv, mcv, hist = rows[0]
        return {
            "null_frac": float(null_frac),
            "n_distinct": float(ndv),
            "most_common": (mcv or "")[:300],
            "histogram_bounds": (hist or "")[:300],
        }

    @tool("plan")
    def submit_plan(self, plan: Plan) -> dict[str, Any]:
        """Submit a query plan; it is validated, compiled to SQL and run read-only.

        Args:
            plan: {"steps": [{"action": "SCAN", "table": "t_zy_visit", "name": "v"},
                {"action": "JOIN", "table": "dict_dept", "name": "d", "on": ["d.ksdm", "v.ksdm"]},
                {"action": "FILTER", "column": "v.visit_type", "op": "=", "value": "ZY"},
                {"action": "FILTER", "condition": {"cmp": ">=", "args": [{"col": "v.ryrq"}, {"date": "2024-01-01"}]}},
                {"action": "GROUP_BY", "column": "d.ksmc"},
                {"action": "AGGREGATE", "function": "count", "alias": "n",
                 "only": {"cmp": ">", "args": [{"col": "v.zyts"}, {"value": 10}]}},
                {"action": "SELECT", "alias": "month", "expr": {"format": "YYYY-MM", "of": {"bucket": "month",
                 "of": {"col": "v.ryrq"}}}},
                {"action": "ORDER_BY", "column": "n", "direction": "desc"}, {"action": "LIMIT", "n": 10}],
                "inputs": {"name": {"steps": [...]}}}. Expressions: col, value, fn (add sub mul div round
                nullif ...), agg (count sum avg min max median percentile; distinct, only), cmp (= <> < <=
                > >= like in between is_null not_null), all, any, not, exists (a subplan), scalar, when
                [[cond, value]...] + else, interval ("3 months"), date, now ("snapshot"), bucket, format,
                part, cast, is_total. JOIN keep_unmatched keeps rows without a match; a FILTER whose
                condition aggregates filters groups; TOTALS adds a total row; FIRST_PER columns keeps the
                first row of each by ORDER_BY.
        """
        if isinstance(plan, dict):
            plan = Plan.model_validate(plan)
        try:
            sql = compile_plan(plan, self.shared.catalog)
        except PlanError as exc:
            raise ToolError(f"plan rejected: {exc}") from exc
        out = self.execute_sql(sql)  # a RanSql, so the call's result carries the compiled SQL
        out["compiled_sql"] = sql
        return out


PLAN_TOOL_NAMES = tools_of(PlanToolkit, "plan")  # with the dictionary and ask_clarify of the emr toolset
CATALOG_TOOL_NAMES = tuple(n for n in PLAN_TOOL_NAMES if n in vars(PlanToolkit) and n != "submit_plan")
