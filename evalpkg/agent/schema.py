"""The eval schema as agents see it, and two-stage schema retrieval (seed 000 §3.3):
keyword + vector match of the question to tables and columns, then full schema of candidates."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import psycopg

SCHEMAS = ("emr", "meta")


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
        """One field per line, tab-separated (seed 000 §4.1: less format noise)."""
        extras = [
            f"unit={self.unit}" if self.unit else "",
            f"codes: {self.codes}" if self.codes else "",
            f"NULL: {self.null_meaning}" if self.null_meaning else "",
            f"time: {self.time_semantics}" if self.time_semantics else "",
        ]
        return "\t".join([self.name, self.type, self.meaning or self.meaning_en, *[e for e in extras if e]])

    def document(self) -> str:
        return " ".join([self.table, self.name, self.meaning, self.meaning_en, self.codes, self.time_semantics])


@dataclass
class Catalog:
    tables: dict[str, str]  # name -> schema-qualified name
    descriptions: dict[str, str]
    columns: dict[str, list[Column]] = field(default_factory=dict)

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
        cat = cls(tables={}, descriptions=descriptions)
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
        return "\n".join([head, "column\ttype\tmeaning\tdetails", *(c.line() for c in self.columns[table])])

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

    def column_scores(self, question: str) -> np.ndarray:
        vector = (self.matrix @ self.vectorizer.transform([question]).T).toarray().ravel()
        q = _tokens(question)
        keyword = np.array([len(q & toks) / (1 + len(q)) for toks in self.col_tokens])
        return np.asarray(vector + keyword)

    def candidate_tables(self, question: str, k: int = 3) -> list[str]:
        scores = self.column_scores(question)
        best: dict[str, float] = {}
        for col, s in zip(self.columns, scores, strict=True):
            if col.table.startswith("t_"):  # facts carry the questions; dictionaries come along via joins
                best[col.table] = max(best.get(col.table, 0.0), float(s))
        return [t for t, _ in sorted(best.items(), key=lambda kv: -kv[1])[:k]]

    def hint(self, question: str, table: str, k: int = 3) -> list[str]:
        """Likely target columns of one table for this question (seed 000 §4.1 summary hint)."""
        scores = self.column_scores(question)
        ranked = sorted((float(s), c.name) for c, s in zip(self.columns, scores, strict=True) if c.table == table)
        return [name for s, name in reversed(ranked[-k:]) if s > 0]
