"""Wiring a run: shared catalog, index and cache; one toolkit (own connection, own simulated user)
per task instance."""

from __future__ import annotations

from evalpkg.agent.cache import ToolCache
from evalpkg.agent.executor import ReadOnlyExecutor
from evalpkg.agent.schema import Catalog, SchemaIndex
from evalpkg.agent.tools import Shared, Toolkit, ToolOptions
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.dburl import with_user
from evalpkg.settings import AGENT_ROLE, EVAL_DB, Settings
from evalpkg.testset.gold import agent_connection, snapshot_version
from evalpkg.testset.models import QuestionVariant, Task


def load_shared(settings: Settings) -> Shared:
    with agent_connection(settings) as conn:
        catalog = Catalog.load(conn)
        with conn.transaction():
            cur = conn.execute("select * from meta.data_dictionary order by table_name, column_name")
            names = [d.name for d in cur.description or []]
            dictionary = [dict(zip(names, (v or "" for v in row), strict=True)) for row in cur.fetchall()]
            examples = [
                {"question": q, "question_en": qe or "", "sql": s}
                for q, qe, s in conn.execute(
                    "select question, question_en, sql_text from meta.sql_examples order by example_id"
                )
            ]
        snap = snapshot_version(conn)
    return Shared(catalog, SchemaIndex(catalog), ToolCache(snap), dictionary, examples)


def agent_url(settings: Settings) -> str:
    return with_user(settings.db_url(EVAL_DB), AGENT_ROLE, settings.agent_password)


def toolkit_for(
    settings: Settings,
    shared: Shared,
    task: Task,
    variant: QuestionVariant,
    options: ToolOptions | None = None,
    executor: ReadOnlyExecutor | None = None,
) -> Toolkit:
    return Toolkit(
        shared=shared,
        executor=executor or ReadOnlyExecutor(agent_url(settings)),
        question=variant.text,
        user=ScriptedUser(task.hidden_slots, variant.language),
        options=options or ToolOptions(),
    )
