"""The results store (database eval_results): runs, plans, trajectories and scores. Writes are
idempotent: an instance is recorded at most once (primary key + ON CONFLICT DO NOTHING)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from evalpkg.agent.trajectory import Trajectory
from evalpkg.db import connect
from evalpkg.errors import DataError
from evalpkg.pipeline.plan import Instance
from evalpkg.runconfig import RunConfig
from evalpkg.settings import RESULTS_DB, Settings

DDL = """
create schema if not exists results;
create table if not exists results.run (
    run_id text primary key, name text not null, config jsonb not null, config_fingerprint text not null,
    testset_version text not null, snapshot_version text not null, created_at timestamptz not null default now(),
    mlflow_run_id text
);
create table if not exists results.instance (
    run_id text not null references results.run on delete cascade, instance_id text not null,
    task_id text not null, language text not null, complexity text not null, repeat int not null, shard int not null,
    primary key (run_id, instance_id)
);
create table if not exists results.trajectory (
    run_id text not null, instance_id text not null, shard int not null, body jsonb not null, digest text not null,
    recorded_at timestamptz not null default now(), primary key (run_id, instance_id),
    foreign key (run_id, instance_id) references results.instance on delete cascade
);
create table if not exists results.score (
    run_id text not null, instance_id text not null, body jsonb not null, scored_at timestamptz not null default now(),
    primary key (run_id, instance_id), foreign key (run_id, instance_id) references results.instance on delete cascade
);
create table if not exists results.served (
    run_id text not null references results.run on delete cascade, shard int not null, identity jsonb not null,
    recorded_at timestamptz not null default now(), primary key (run_id, shard)
);
"""


def run_dir(settings: Settings, run_id: str) -> Path:
    return settings.state_dir / "runs" / run_id


@contextmanager
def results_db(settings: Settings) -> Iterator[psycopg.Connection]:
    with connect(settings.db_url(RESULTS_DB)) as conn:
        yield conn


def ensure_schema(settings: Settings) -> None:
    with results_db(settings) as conn:
        conn.execute(DDL)


def create_run(
    settings: Settings, run_id: str, config: RunConfig, testset_version: str, snapshot: str, instances: list[Instance]
) -> None:
    ensure_schema(settings)
    with results_db(settings) as conn, conn.transaction():
        conn.execute(
            "insert into results.run (run_id, name, config, config_fingerprint, testset_version, snapshot_version) "
            "values (%s, %s, %s, %s, %s, %s) on conflict (run_id) do nothing",
            (
                run_id,
                config.name,
                Jsonb(config.model_dump(mode="json")),
                config.fingerprint(),
                testset_version,
                snapshot,
            ),
        )
        with conn.cursor() as cur:
            cur.executemany(
                "insert into results.instance values (%s, %s, %s, %s, %s, %s, %s) on conflict do nothing",
                [(run_id, i.instance_id, i.task_id, i.language, i.complexity, i.repeat, i.shard) for i in instances],
            )


def load_run(settings: Settings, run_id: str) -> tuple[RunConfig, str, str, list[Instance]]:
    ensure_schema(settings)
    with results_db(settings) as conn:
        row = conn.execute(
            "select config, testset_version, snapshot_version from results.run where run_id = %s", (run_id,)
        ).fetchone()
        if row is None:
            raise DataError(f"run {run_id!r} not found in the results store")
        instances = [
            Instance(instance_id=r[0], task_id=r[1], language=r[2], complexity=r[3], repeat=r[4], shard=r[5])
            for r in conn.execute(
                "select instance_id, task_id, language, complexity, repeat, shard "
                "from results.instance where run_id = %s order by instance_id",
                (run_id,),
            )
        ]
        served = conn.execute("select shard, identity from results.served where run_id = %s", (run_id,)).fetchall()
    config = RunConfig.model_validate(row[0])
    config.served.update({shard: identity for shard, identity in served})
    return config, row[1], row[2], instances


def record_served(settings: Settings, run_id: str, shard: int, identity: dict[str, str]) -> None:
    """What the shard's worker served; the latest attempt's (a retry may land on another machine)."""
    with results_db(settings) as conn:
        conn.execute(
            "insert into results.served (run_id, shard, identity) values (%s, %s, %s) on conflict (run_id, shard) "
            "do update set identity = excluded.identity, recorded_at = now()",
            (run_id, shard, Jsonb(identity)),
        )


def recorded_ids(settings: Settings, run_id: str, shard: int | None = None) -> set[str]:
    with results_db(settings) as conn:
        query = "select instance_id from results.trajectory where run_id = %s"
        params: tuple[Any, ...] = (run_id,)
        if shard is not None:
            query += " and shard = %s"
            params += (shard,)
        return {r[0] for r in conn.execute(query, params)}


def record(conn: psycopg.Connection, run_id: str, shard: int, traj: Trajectory) -> bool:
    """True if this call recorded it; False if it was already there (exactly once)."""
    cur = conn.execute(
        "insert into results.trajectory (run_id, instance_id, shard, body, digest) values (%s, %s, %s, %s, %s) "
        "on conflict do nothing",
        (run_id, traj.instance_id, shard, Jsonb(traj.model_dump(mode="json")), traj.digest()),
    )
    return cur.rowcount == 1


def _stream(conn: psycopg.Connection, run_id: str, shard: int | None) -> Iterator[Trajectory]:
    """A server-side cursor: a shard's trajectories never sit in memory all at once."""
    query = "select body from results.trajectory where run_id = %s"
    params: tuple[Any, ...] = (run_id,)
    if shard is not None:
        query += " and shard = %s"
        params += (shard,)
    with conn.transaction(), conn.cursor(name="trajectories") as cur:
        cur.execute(query + " order by instance_id", params)
        for (body,) in cur:
            yield Trajectory.model_validate(body)


def trajectories(settings: Settings, run_id: str, shard: int | None = None) -> list[Trajectory]:
    with results_db(settings) as conn:
        return list(_stream(conn, run_id, shard))


def export_jsonl(settings: Settings, run_id: str, shard: int) -> Path:
    """One JSONL per shard, rewritten from the store so it never holds a partial or duplicate line."""
    path = run_dir(settings, run_id) / f"shard-{shard:03d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with results_db(settings) as conn, tmp.open("w", encoding="utf-8") as f:
        for t in _stream(conn, run_id, shard):
            f.write(json.dumps(t.model_dump(mode="json"), ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def save_scores(settings: Settings, run_id: str, scores: list[dict[str, Any]]) -> None:
    with results_db(settings) as conn, conn.transaction():
        conn.execute("delete from results.score where run_id = %s", (run_id,))
        with conn.cursor() as cur:
            cur.executemany(
                "insert into results.score (run_id, instance_id, body) values (%s, %s, %s)",
                [(run_id, s["instance_id"], Jsonb(s)) for s in scores],
            )


def saved_scores(settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The scores the run's last scoring saved, in instance order (empty: never scored)."""
    with results_db(settings) as conn:
        rows = conn.execute(
            "select body from results.score where run_id = %s order by instance_id", (run_id,)
        ).fetchall()
    return [r[0] for r in rows]


def scored_runs(settings: Settings, name: str | None = None) -> list[str]:
    """Every run with saved scores (of that --name, where given), oldest first."""
    ensure_schema(settings)
    with results_db(settings) as conn:
        rows = conn.execute(
            "select r.run_id from results.run r where exists (select 1 from results.score s where s.run_id = r.run_id)"
            " and (%s::text is null or r.name = %s) order by r.created_at, r.run_id",
            (name, name),
        ).fetchall()
    return [r[0] for r in rows]


def comparator_versions(settings: Settings, run_id: str) -> set[int | None]:
    """The comparator versions the run's saved scores were made with (empty: never scored)."""
    with results_db(settings) as conn:
        rows = conn.execute(
            "select distinct (body->>'comparator_version')::int from results.score where run_id = %s", (run_id,)
        ).fetchall()
    return {r[0] for r in rows}


def set_mlflow_run(settings: Settings, run_id: str, mlflow_run_id: str) -> None:
    with results_db(settings) as conn:
        conn.execute("update results.run set mlflow_run_id = %s where run_id = %s", (mlflow_run_id, run_id))
