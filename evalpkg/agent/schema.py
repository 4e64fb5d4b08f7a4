"""The eval schema as agents see it, and two-stage schema retrieval:
keyword + vector match of the question to tables and columns, then full schema of candidates."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np
import psycopg

SCHEMAS = ("emr", "meta")
KEYWORD_WEIGHT = 1.0


def _table_keywords() -> dict[str, list[str]]:
    text = resources.files("evalpkg.agent").joinpath("data/table_keywords.json").read_text("utf-8")
    data: dict[str, list[str]] = json.loads(text)
    return data


@dataclass
class Column:
    table: str
    name: str
    type: str
    meaning: str = ""
    meaning_en: str = ""
    unit: str = ""
    codes: str = ""
    null_meaning: str = ""
    time_semantics: str = ""

    @property
    def is_time(self) -> bool:
        return self.type.startswith(("timestamp", "date"))

    def line(self) -> str:
        """One field per line, tab-separated (less format noise for the model)."""
        extras = [
            f"unit={self.unit}" if self.unit else "",
            f"codes: {self.codes}" if self.codes else "",
            f"NULL: {self.null_meaning}" if self.null_meaning else "",
            f"time: {self.time_semantics}" if self.time_semantics else "",
        ]
        return "\t".join([self.name, self.type, self.meaning or self.meaning_en, *[e for e in extras if e]])

    def document(self) -> str:
        return " ".join([self.table, self.name, self.meaning, self.meaning_en, self.codes, self.time_semantics])


@dataclass(frozen=True)
class Index:
    columns: tuple[str, ...]
    primary: bool

    def text(self) -> str:
        return f"{'primary key' if self.primary else 'index'} ({', '.join(self.columns)})"

    def leads_with(self, columns: list[str]) -> bool:
        return list(self.columns[: len(columns)]) == columns


def read_indexes(conn: psycopg.Connection, schemas: Iterable[str]) -> dict[str, list[Index]]:
    """Every index of the tables in these schemas, by table name: the primary key first, then by columns."""
    rows = conn.execute(
        "select c.relname, array_agg(a.attname::text order by k.ord), i.indisprimary "
        "from pg_index i join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace "
        "cross join unnest(i.indkey) with ordinality as k(attnum, ord) "
        "join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum "
        "where n.nspname = any(%s) group by c.relname, i.indexrelid, i.indisprimary "
        "order by c.relname, i.indisprimary desc, 2",
        (list(schemas),),
    ).fetchall()
    out: dict[str, list[Index]] = {}
    for table, columns, primary in rows:
        out.setdefault(table, []).append(Index(tuple(columns), bool(primary)))
    return out


@dataclass
class Catalog:
    tables: dict[str, str]  # name -> schema-qualified name
    descriptions: dict[str, str]
    columns: dict[str, list[Column]] = field(default_factory=dict)
    entity_names: dict[str, list[str]] = field(default_factory=dict)  # values that point at a table
    indexes: dict[str, list[Index]] = field(default_factory=dict)  # table -> its primary key, then its indexes

    @classmethod
    def load(cls, conn: psycopg.Connection) -> Catalog:
        descriptions = json.loads(resources.files("evalpkg.agent").joinpath("data/tables.json").read_text("utf-8"))
        with conn.transaction():
            rows = conn.execute(
                "select table_schema, table_name, column_name, data_type from information_schema.columns "
                "where table_schema = any(%s) order by table_schema, table_name, ordinal_position",
                (list(SCHEMAS),),
            ).fetchall()
            dictionary = {
                (r[0], r[1]): r[2:]
                for r in conn.execute(
                    "select table_name, column_name, meaning, meaning_en, unit, code_mapping, null_meaning, "
                    "time_semantics from meta.data_dictionary"
                )
            }
            indexes = read_indexes(conn, SCHEMAS)
            entities = {
                "t_zy_visit": [v for r in conn.execute("select ksmc, ksmc_en from emr.dict_dept") for v in r if v],
                "t_lab_result": [
                    v for r in conn.execute("select xmmc, xmmc_en from emr.dict_lab_item") for v in r if v
                ],
                "t_med_order": [
                    v for r in conn.execute("select ypmc, ypmc_en, ypfl from emr.dict_drug") for v in r if v
                ],
                "t_diag_record": [r[0] for r in conn.execute("select distinct zdmc from emr.t_diag_record")],
            }
        cat = cls(tables={}, descriptions=descriptions, entity_names=entities, indexes=indexes)
        for schema, table, column, dtype in rows:
            cat.tables[table] = f"{schema}.{table}"
            d = dictionary.get((table, column), ("", "", "", "", "", ""))
            cat.columns.setdefault(table, []).append(Column(table, column, dtype, *[x or "" for x in d]))
        return cat

    def resolve(self, name: str) -> str | None:
        bare = name.split(".")[-1].strip().strip('"').lower()
        return bare if bare in self.tables else None

    def table_text(self, table: str) -> str:
        head = f"{self.tables[table]}: {self.descriptions.get(table, '')}"
        # which joins and filters are cheap: an agent plans knowing what the database keys and indexes
        keys = [f"keys: {'; '.join(i.text() for i in self.indexes[table])}"] if table in self.indexes else []
        return "\n".join([head, *keys, "column\ttype\tmeaning\tdetails", *(c.line() for c in self.columns[table])])

    def overview(self) -> str:
        return "\n".join(f"{self.tables[t]}\t{self.descriptions.get(t, '')}" for t in sorted(self.tables))

    def full_text(self) -> str:
        return "\n\n".join(self.table_text(t) for t in sorted(self.tables))

    def time_columns(self, table: str) -> list[Column]:
        return [c for c in self.columns.get(table, []) if c.is_time]


def _tokens(text: str) -> set[str]:
    """Latin words plus Chinese character bigrams: enough to match 糖化血红蛋白 to HbA1c's row."""
    text = text.lower()
    words = set(re.findall(r"[a-z][a-z0-9_]+", text))
    han = re.findall(r"[\u4e00-\u9fff]+", text)
    return words | {run[i : i + 2] for run in han for i in range(max(len(run) - 1, 1))}


class SchemaIndex:
    """Stage 1 of retrieval: rank tables and columns against a question."""

    def __init__(self, catalog: Catalog) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.catalog = catalog
        self.columns = [c for cols in catalog.columns.values() for c in cols]
        docs = [c.document() + " " + catalog.descriptions.get(c.table, "") for c in self.columns]
        self.vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3), sublinear_tf=True)
        self.matrix = self.vectorizer.fit_transform(docs)
        self.col_tokens = [_tokens(d) for d in docs]
        self.keywords = {t: [w.lower() for w in words] for t, words in _table_keywords().items()}
        for table, values in catalog.entity_names.items():
            self.keywords.setdefault(table, []).extend(v.lower() for v in values if len(v) >= 2)

    @lru_cache(maxsize=4096)  # noqa: B019 - one index per run; questions repeat across tool calls
    def column_scores(self, question: str) -> np.ndarray:
        vector = (self.matrix @ self.vectorizer.transform([question]).T).toarray().ravel()
        q = _tokens(question)
        keyword = np.array([len(q & toks) / (1 + len(q)) for toks in self.col_tokens])
        return np.asarray(vector + keyword)

    def table_scores(self, question: str) -> dict[str, float]:
        """Keyword stage (clinical vocabulary and dictionary values per table) + vector stage."""
        scores = self.column_scores(question)
        vector: dict[str, float] = {}
        for col, s in zip(self.columns, scores, strict=True):
            if col.table.startswith("t_"):  # facts carry the questions; dictionaries come along via joins
                vector[col.table] = max(vector.get(col.table, 0.0), float(s))
        top = max(vector.values(), default=0.0) or 1.0
        q = question.lower()
        return {t: v / top + KEYWORD_WEIGHT * any(k in q for k in self.keywords.get(t, ())) for t, v in vector.items()}

    def candidate_tables(self, question: str, k: int = 4) -> list[str]:
        """Every table a keyword points at, else the best vector match; at most k."""
        scores = self.table_scores(question)
        hits = [t for t, s in sorted(scores.items(), key=lambda kv: -kv[1]) if s >= KEYWORD_WEIGHT]
        if not hits and scores:
            hits = [max(scores, key=lambda t: scores[t])]
        return hits[:k]

    def hint(self, question: str, table: str, k: int = 3) -> list[str]:
        """Likely target columns of one table for this question (a summary hint)."""
        scores = self.column_scores(question)
        ranked = sorted((float(s), c.name) for c, s in zip(self.columns, scores, strict=True) if c.table == table)
        return [name for s, name in reversed(ranked[-k:]) if s > 0]
