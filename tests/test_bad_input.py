"""Every bad input to every command, as a new user would type it: exactly one stderr line
`evalpkg: error: ...`, exit 2 for usage errors and 1 otherwise, and nothing written before the
failure: the results store, the prod and eval databases, the tasks/ tree and the state directory
are the same afterwards.

The CLI runs in-process (main() with captured stderr); cases marked `subprocess` run as a real
process, where a stray progress line, warning or traceback would show."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import pytest

from evalpkg.cli import main
from evalpkg.db import connect
from evalpkg.pipeline.run import plan_run, run_all
from evalpkg.runconfig import RunConfig
from evalpkg.settings import EVAL_DB, PROD_DB, PROJECT_ROOT, RESULTS_DB, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset.models import Task
from evalpkg.testset.refresh import Candidate, Decision
from evalpkg.testset.review_queue import Wording
from tests.conftest import free_port

DOWN_PG = "postgresql://nobody@127.0.0.1:9/nowhere"  # nothing listens on the discard port
DOWN_HTTP = "http://127.0.0.1:9/v1"
QUEUE_MONTH = "2026-09"
SOME_TASK = "st-current_inpatients_total-001.json"  # any v1 task; v1 is frozen
TICKETS = {"pending": 9001, "approved": 9002, "released": 9003}  # the review queue
STATE_QUERIES = {
    RESULTS_DB: (
        "select count(*), count(mlflow_run_id), max(created_at) from results.run",
        "select count(*) from results.instance",
        "select count(*), max(recorded_at) from results.trajectory",
        "select count(*), max(recorded_at) from results.served",
        "select count(*), max(scored_at) from results.score",
    ),
    EVAL_DB: ("select md5(hmac_key) from deid_secret.hmac_key", "select snapshot_version from meta.snapshot"),
    PROD_DB: ("select count(*) from his.t_patient_info", "select count(*) from ops.query_ticket"),
}

Env = dict[str, str | None]  # None: unset


@dataclass(frozen=True)
class Bad:
    args: str  # shell words; $run, $planned, $pending, $approved, $released name the fixtures below
    code: int
    says: str  # part of the error line; $state is the state directory of the case
    env: Env = field(default_factory=dict)
    tasks: Callable[[Path], None] | None = None  # breaks a copy of the tasks tree
    state: Callable[[Path], Path] | None = None  # makes a state directory under a scratch folder
    subprocess: bool = False


def bad(case_id: str, args: str, code: int, says: str, **kw: Any) -> Any:
    return pytest.param(Bad(args, code, says, **kw), id=case_id)


# --- ways to break a copy of the tasks tree ---------------------------------------------------


def task_file(tasks: Path, name: str = SOME_TASK) -> Path:
    return tasks / "v1" / "tasks" / name


def write(relpath: str, content: str | bytes) -> Callable[[Path], None]:
    def apply(tasks: Path) -> None:
        path = tasks / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return apply


def edit_task(**changes: Any) -> Callable[[Path], None]:
    def apply(tasks: Path) -> None:
        path = task_file(tasks)
        data = json.loads(path.read_text(encoding="utf-8"))
        data.update(changes)
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    return apply


def edit_manifest(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def apply(tasks: Path) -> None:
        path = tasks / "v1" / "MANIFEST.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(change(data) or data), encoding="utf-8")

    return apply


def remove(relpath: str) -> Callable[[Path], None]:
    def apply(tasks: Path) -> None:
        path = tasks / relpath
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    return apply


def extra_task(tasks: Path) -> None:
    shutil.copy(task_file(tasks), task_file(tasks, "st-stowaway-001.json"))


def queue_file(tasks: Path, ticket: int) -> Path:
    return tasks / "review" / QUEUE_MONTH / f"st-ticket_{ticket}-001.json"


def edit_candidate(which: str, change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def apply(tasks: Path) -> None:
        path = queue_file(tasks, TICKETS[which])
        data = json.loads(path.read_text(encoding="utf-8"))
        change(data)
        path.write_text(json.dumps(data), encoding="utf-8")

    return apply


TASK_NOT_JSON = write(f"v1/tasks/{SOME_TASK}", '{"id": ')
TASK_NOT_UTF8 = write(f"v1/tasks/{SOME_TASK}", b"\xff\xfe not text")
MANIFEST_NOT_JSON = write("v1/MANIFEST.json", "{")
QUEUE_NOT_JSON = write(f"review/{QUEUE_MONTH}/st-ticket_9999-001.json", "not json")
WORDINGS = "testset review $pending --wordings $state/wordings.json"


# --- ways to make a state directory unusable --------------------------------------------------


def state_is_a_file(scratch: Path) -> Path:
    path = scratch / "state"
    path.write_text("not a directory\n")
    return path


def with_template_file(content: str) -> Callable[[Path], Path]:
    """A state directory holding templates.json (a draft template file for try-templates)."""
    return with_state_file("templates.json", content)


def with_state_file(name: str, content: str) -> Callable[[Path], Path]:
    """A state directory holding one input file the case names as $state/<name>."""

    def make(scratch: Path) -> Path:
        path = scratch / "state"
        path.mkdir()
        (path / name).write_text(content, encoding="utf-8")
        return path

    return make


ONE_TEMPLATE = '{"format_version": 1, "templates": [{"id": "draft_one", "type": "single_table", "difficulty": "easy"}]}'
# a whole template of v1, in a draft file of its own
TWICE = json.dumps(
    {
        "format_version": 1,
        "templates": json.loads((PROJECT_ROOT / "evalpkg/testset/templates_v1.json").read_text())["templates"][:1],
    }
)


def state_under_locked_dir(scratch: Path) -> Path:
    """Not writable for its owner (non-root) and not reachable for the 'postgres' user (root)."""
    locked = scratch / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    return locked / "state"


DOWN = {"EVALPKG_PG_URL": DOWN_PG}
EMBEDDED = {"EVALPKG_PG_URL": None}  # the embedded cluster, never started in these tests

CASES = [
    # the parser
    bad("unknown-command", "frobnicate", 2, "No such command 'frobnicate'"),
    bad("unknown-option-on-a-group", "testset --bogus", 2, "No such option: --bogus"),
    bad("misspelt-option", "prod generate --patiens 10", 2, "--patiens", subprocess=True),
    # settings from the environment
    bad("env-pg-port-out-of-range", "db-url eval", 1, "EVALPKG_PG_PORT: must be 1024..65535, got '80'",
        env={**EMBEDDED, "EVALPKG_PG_PORT": "80"}),
    bad("env-pg-port-not-a-number", "db-url eval", 1, "EVALPKG_PG_PORT: input should be a valid integer",
        env={**EMBEDDED, "EVALPKG_PG_PORT": "fivefive"}),
    bad("env-pg-url-not-postgres", "status", 1, "EVALPKG_PG_URL: expected postgresql://",
        env={"EVALPKG_PG_URL": "http://db.example:5432/x"}),
    bad("env-mlflow-port-not-a-number", "status", 1, "EVALPKG_MLFLOW_PORT",
        env={"EVALPKG_MLFLOW_URI": None, "EVALPKG_MLFLOW_PORT": "x"}),
    bad("env-statement-timeout-zero", "run --limit 1 --no-track", 1,
        "EVALPKG_AGENT_STATEMENT_TIMEOUT_MS: must be > 0", env={"EVALPKG_AGENT_STATEMENT_TIMEOUT_MS": "0"}),
    # up / down / status
    bad("up-unreachable-server", "up", 1, "cannot connect to postgresql://nobody@127.0.0.1:9/", env=DOWN),
    bad("up-state-dir-locked", "up", 1, "$state", env=EMBEDDED, state=state_under_locked_dir),
    bad("up-state-dir-is-a-file", "up", 1, "$state", env=EMBEDDED, state=state_is_a_file, subprocess=True),
    bad("up-extra-argument", "up now", 2, "unexpected extra argument"),
    bad("down-extra-argument", "down now", 2, "unexpected extra argument"),
    bad("status-unknown-option", "status --verbose", 2, "No such option: --verbose"),
    # db-url
    bad("db-url-unknown-target", "db-url prd", 2, "'prd' is not one of 'prod', 'eval', 'results', 'agent'"),
    bad("db-url-missing-target", "db-url", 2, "Missing argument 'target'. Choose from: prod, eval", subprocess=True),
    # prod generate
    bad("prod-patients-below-range", "prod generate --patients 50", 2, "50 is outside 100..100000"),
    bad("prod-patients-above-range", "prod generate --patients 100001", 2, "100001 is outside 100..100000"),
    bad("prod-patients-not-a-number", "prod generate --patients many", 2, "'--patients'"),
    bad("prod-seed-not-a-number", "prod generate --seed x", 2, "'--seed'"),
    bad("prod-as-of-impossible-date", "prod generate --as-of 2026-02-30", 2, "'2026-02-30' is not YYYY-MM-DD"),
    bad("prod-as-of-wrong-format", "prod generate --as-of 31/10/2026", 2, "is not YYYY-MM-DD"),
    bad("prod-unreachable-server", "prod generate --patients 100", 1, "cannot connect", env=DOWN, subprocess=True),
    bad("prod-unknown-subcommand", "prod destroy", 2, "No such command 'destroy'"),
    # deid set-key
    bad("deid-from-env-unset", "deid set-key --from-env BAD_INPUT_UNSET", 1, "BAD_INPUT_UNSET is not set",
        env={"BAD_INPUT_UNSET": None}),
    bad("deid-from-env-not-hex", "deid set-key --from-env BAD_INPUT_KEY", 1, "BAD_INPUT_KEY is not a hex string",
        env={"BAD_INPUT_KEY": "not-hex"}),
    bad("deid-key-too-short", "deid set-key --replace --from-env BAD_INPUT_KEY", 1, "2 bytes is too short",
        env={"BAD_INPUT_KEY": "abcd"}),
    bad("deid-unreachable-server", "deid set-key", 1, "cannot connect", env=DOWN),
    bad("deid-replace-takes-no-value", "deid set-key --replace yes", 2, "unexpected extra argument"),
    # sync
    bad("sync-unreachable-server", "sync", 1, "cannot connect to postgresql://nobody@", env=DOWN, subprocess=True),
    bad("sync-flag-takes-no-value", "sync --full-refresh yes", 2, "unexpected extra argument"),
    # testset build
    bad("build-releases-exist", "testset build", 1, "releases exist already"),
    bad("audit-leaks-unreachable-server", "testset audit-leaks", 1, "cannot connect", env=DOWN),
    bad("study-draw-sample-too-large", "testset study-draw --seed 1 --size 999", 1,
        "templates with an answerable task, fewer than 999"),
    bad("study-measure-no-sample", "testset study-measure /no/such/sample --answers a.json --no-reference-worlds", 1,
        "/no/such/sample/key.json: No such file or directory"),
    bad("build-seed-not-a-number", "testset build --seed x", 2, "'--seed'"),
    bad("build-unreachable-server", "testset build", 1, "cannot connect", env=DOWN, tasks=remove("v1")),
    # testset validate: the release on disk
    bad("validate-unknown-release", "testset validate v99", 1, "v99/MANIFEST.json: release manifest not found"),
    bad("validate-no-release", "testset validate", 1, "no release (v1, v2, ...) found", tasks=remove("v1")),
    bad("validate-tasks-dir-missing", "testset validate", 1, "no release",
        env={"EVALPKG_TASKS_DIR": "/nonexistent/tasks"}),
    bad("validate-task-not-json", "testset validate v1", 1, f"{SOME_TASK} (sha256 differs from MANIFEST.json): "
        "field (file): Invalid JSON", tasks=TASK_NOT_JSON),
    bad("validate-task-not-utf8", "testset validate v1", 1, f"{SOME_TASK}: not UTF-8 text", tasks=TASK_NOT_UTF8,
        subprocess=True),
    bad("validate-task-field-unknown-value", "testset validate v1", 1, "field difficulty: Input should be 'easy'",
        tasks=edit_task(difficulty="impossible")),
    bad("validate-task-field-wrong-type", "testset validate v1", 1, "field gold_sql: Input should be a valid array",
        tasks=edit_task(gold_sql="select 1")),
    bad("validate-task-edited-after-release", "testset validate v1", 1, "sha256 differs from MANIFEST.json",
        tasks=edit_task(maintenance_notes="edited by hand")),
    bad("validate-task-missing", "testset validate v1", 1, "listed in MANIFEST.json but missing",
        tasks=remove(f"v1/tasks/{SOME_TASK}")),
    bad("validate-task-not-in-manifest", "testset validate v1", 1, "st-stowaway-001.json: file is not in MANIFEST",
        tasks=extra_task),
    bad("validate-manifest-not-json", "testset validate v1", 1, "MANIFEST.json: field (file): Invalid JSON",
        tasks=MANIFEST_NOT_JSON),
    bad("validate-manifest-not-utf8", "testset validate v1", 1, "MANIFEST.json: not UTF-8 text",
        tasks=write("v1/MANIFEST.json", b"\xff")),
    bad("validate-manifest-not-an-object", "testset validate v1", 1, "field (file): Input should be an object",
        tasks=write("v1/MANIFEST.json", "[]")),
    bad("validate-manifest-field-missing", "testset validate v1", 1, "MANIFEST.json: field files: Field required",
        tasks=edit_manifest(lambda m: m.pop("files") and m)),
    bad("validate-manifest-missing", "testset validate v1", 1, "release manifest not found",
        tasks=remove("v1/MANIFEST.json")),
    bad("validate-unreachable-server", "testset validate v1", 1, "cannot connect", env=DOWN),
    bad("validate-extra-argument", "testset validate v1 v2", 2, "unexpected extra argument"),
    # testset audit-scorer / worlds
    bad("audit-unknown-release", "testset audit-scorer v99", 1, "release manifest not found"),
    bad("audit-unreachable-server", "testset audit-scorer v1", 1, "cannot connect", env=DOWN),
    bad("worlds-extra-argument", "testset worlds v1", 2, "unexpected extra argument"),
    # testset stats / diff / changes
    bad("stats-unknown-release", "testset stats v99", 1, "release manifest not found"),
    bad("stats-task-not-json", "testset stats v1", 1, "Invalid JSON", tasks=TASK_NOT_JSON),
    bad("stats-manifest-not-json", "testset stats", 1, "MANIFEST.json: field (file)", tasks=MANIFEST_NOT_JSON),
    bad("diff-unknown-release", "testset diff v1 v99", 1, "v99/MANIFEST.json: release manifest not found"),
    bad("diff-missing-argument", "testset diff v1", 2, "Missing argument 'b'"),
    bad("diff-task-not-utf8", "testset diff v1 v1", 1, "not UTF-8 text", tasks=TASK_NOT_UTF8),
    bad("changes-unknown-release", "testset changes v99", 1, "v99/MANIFEST.json: release manifest not found"),
    bad("changes-unknown-kind", "testset changes v1 --kind moved", 2,
        "--kind: must be added, changed or removed, got 'moved'"),
    bad("changes-record-missing", "testset changes v1", 1, "v1/changes.json: per-task changes not found",
        tasks=remove("v1/changes.json")),
    bad("changes-record-not-json", "testset changes", 1, "v1/changes.json: field (file): Invalid JSON",
        tasks=write("v1/changes.json", "{")),
    bad("readings-unknown-release", "testset readings v99", 1, "v99/MANIFEST.json: release manifest not found"),
    bad("readings-task-not-json", "testset readings v1", 1, "Invalid JSON", tasks=TASK_NOT_JSON),
    bad("migrate-not-the-latest", "testset migrate --from v9", 1, "--from v9: migrate the latest release (v1)"),
    bad("migrate-missing-from", "testset migrate", 2, "Missing option '--from'"),
    bad("reselect-not-the-latest", "testset reselect --from v9", 1, "--from v9: reselect from the latest release (v1)"),
    bad("reselect-missing-from", "testset reselect", 2, "Missing option '--from'"),
    bad("adjudicate-not-the-latest", "testset adjudicate --from v9", 1, "--from v9: adjudicate the latest release (v1)"),
    bad("adjudicate-before-annotation", "testset adjudicate --from v1", 1, "no second annotation of v1"),
    bad("annotate-missing-file", "testset annotate --file $state/none.json", 1, "$state/none.json: No such file"),
    bad("annotate-missing-option", "testset annotate", 2, "Missing option '--file'"),
    bad("try-templates-no-such-file", "testset try-templates $state/none.json", 1, "$state/none.json: no such template file",
        state=with_template_file("{}")),
    bad("try-templates-not-json", "testset try-templates $state/templates.json", 1, "not a readable JSON file",
        state=with_template_file("{")),
    bad("try-templates-template-missing-a-field", "testset try-templates $state/templates.json", 1,
        "template draft_one: field count: Field required", state=with_template_file(ONE_TEMPLATE)),
    bad("try-templates-id-defined-elsewhere", "testset try-templates $state/templates.json", 1,
        "template outpatient_visits_dept_quarter is defined in another template file already",
        state=with_template_file(TWICE)),
    bad("arbitrate-unknown-outcome", "testset review --arbitrate st-x-001 --outcome maybe --reviewer a --note n", 2,
        "--outcome: must be one of gold_upheld, gold_fixed"),
    bad("arbitrate-no-disagreement", "testset review --arbitrate st-x-001 --outcome dropped --reviewer a --note n", 2,
        "st-x-001 is not a task the annotators disagreed on"),
    # testset refresh / review / release
    bad("refresh-month-13", "testset refresh --month 2026-13", 2, "--month: must be YYYY-MM"),
    bad("refresh-month-without-dash", "testset refresh --month 202610", 2, "got '202610'"),
    bad("refresh-month-missing", "testset refresh", 2, "Missing option '--month'"),
    bad("refresh-unreachable-server", "testset refresh --month 2026-10", 1, "cannot connect", env=DOWN),
    bad("refresh-queue-file-not-json", "testset refresh --month 2026-10", 1, "st-ticket_9999-001.json: field (file)",
        tasks=QUEUE_NOT_JSON),
    bad("refresh-release-corrupt", "testset refresh --month 2026-10", 1, "MANIFEST.json", tasks=MANIFEST_NOT_JSON),
    bad("review-without-reviewer", "testset review $pending", 2, "--reviewer: required"),
    bad("review-unknown-role", "testset review $pending --reviewer ana --role nurse", 2,
        "--role: must be clinician, analyst or dba, got 'nurse'"),
    bad("review-unknown-candidate", "testset review st-nope-001 --reviewer ana --role dba", 1,
        "not in the review queue: st-nope-001"),
    bad("review-already-released-after-a-pending-one", "testset review $pending $released --reviewer ana --role dba",
        1, "already released, decisions are final: $released (in v1)"),
    bad("review-queue-file-not-json", "testset review", 1, "field (file): Invalid JSON", tasks=QUEUE_NOT_JSON),
    # a file with some of the wordings would approve those by accident: all of them, or nothing written
    bad("review-wordings-file-partial", f"{WORDINGS} --reviewer ana --role clinician", 2,
        "holds 1 of the 6 wordings of $pending, without zh/colloquial, zh/technical, en/colloquial, en/plain, "
        "en/technical (each its text, or null to keep the draft); nothing was approved",
        state=with_state_file("wordings.json", '{"zh/plain": "How many inpatients are there now?"}')),
    bad("review-wordings-file-not-json", f"{WORDINGS} --reviewer ana --role clinician", 2,
        "--wordings $state/wordings.json: not JSON (line 1", state=with_state_file("wordings.json", '{"zh/plain": ')),
    bad("review-wordings-file-not-an-object", f"{WORDINGS} --reviewer ana --role clinician", 2,
        "expected an object of wordings", state=with_state_file("wordings.json", '["zh/plain"]')),
    bad("review-queue-decision-unknown-role", "testset review", 1, "field decisions.0.role",
        tasks=edit_candidate("approved", lambda c: c["decisions"][0].update(role="nurse"))),
    bad("release-unreachable-server", "testset release", 1, "cannot connect", env=DOWN),
    bad("release-queue-file-not-json", "testset release", 1, "field (file): Invalid JSON", tasks=QUEUE_NOT_JSON),
    bad("release-latest-release-corrupt", "testset release", 1, "MANIFEST.json: field (file)",
        tasks=MANIFEST_NOT_JSON),
    bad("release-extra-argument", "testset release v3", 2, "unexpected extra argument"),
    # run: the configuration, whole, before anything is planned
    bad("run-agent-unknown", "run --agent foo", 2, "--agent: must be gold, openai or perturb:<", subprocess=True),
    bad("run-agent-unknown-perturbation", "run --agent perturb:typo", 2, "got 'perturb:typo'"),
    bad("run-openai-without-endpoint", "run --agent openai --limit 1", 2, "agent openai needs an endpoint",
        subprocess=True),
    bad("run-endpoint-not-a-url", "run --agent openai --endpoint localhost:8000", 2,
        "--endpoint: expected an http(s) URL"),
    bad("run-endpoint-unreachable", f"run --agent openai --endpoint {DOWN_HTTP} --limit 1", 1,
        f"--endpoint: cannot reach {DOWN_HTTP}"),
    bad("run-repeats-zero", "run --repeats 0", 2, "--repeats: must be 1..10, got 0"),
    bad("run-repeats-above-range", "run --repeats 11", 2, "--repeats: must be 1..10, got 11"),
    bad("run-repeats-not-a-number", "run --repeats two", 2, "'--repeats'"),
    bad("run-shards-zero", "run --shards 0", 2, "--shards: must be 1..256, got 0"),
    bad("run-shards-above-range", "run --shards 257", 2, "--shards: must be 1..256, got 257"),
    bad("run-concurrency-zero", "run --concurrency 0", 2, "--concurrency: must be 1..256, got 0"),
    bad("run-limit-zero", "run --limit 0", 2, "--limit: must be >= 1, got 0"),
    bad("run-judge-without-model", f"run --judge-endpoint {DOWN_HTTP}", 2, "judge_endpoint and judge_model go together"),
    bad("run-judge-unreachable", f"run --judge-endpoint {DOWN_HTTP} --judge-model j --limit 1", 1,
        "--judge-endpoint: cannot reach"),
    bad("run-temperature-above-range", "run --temperature 2.5", 2, "--temperature: must be 0..2, got 2.5"),
    bad("run-temperature-negative", "run --temperature -1", 2, "--temperature: must be 0..2"),
    bad("run-max-steps-zero", "run --max-steps 0", 2, "--max-steps: must be >= 1, got 0"),
    bad("run-language-unknown", "run --language zh --language fr", 2, "--language: must be zh or en, got 'fr'"),
    bad("run-complexity-unknown", "run --complexity casual", 2,
        "--complexity: must be colloquial, plain or technical, got 'casual'"),
    bad("run-config-not-json", "run --config {agent:gold}", 2, "--config: not JSON"),
    bad("run-config-not-an-object", "run --config '[1, 2]'", 2, "--config: expected a JSON object"),
    bad("run-config-unknown-field", """run --config '{"stratgy": "plan"}'""", 2, "--config: unknown field 'stratgy'"),
    bad("run-config-strategy-unknown", """run --config '{"strategy": "tree"}'""", 2,
        "--config strategy: must be 'react' or 'plan', got 'tree'"),
    bad("run-config-toolset-unknown", """run --config '{"toolset": "emr-v2"}'""", 2, "--config toolset: must be"),
    bad("run-config-wrong-type", """run --config '{"sql_timeout_ms": "fast"}'""", 2,
        "--config sql_timeout_ms: input should be a valid integer"),
    bad("run-config-format-version", """run --config '{"format_version": 2}'""", 2,
        "--config format_version: must be 1, got 2"),
    bad("run-config-llm-user-without-openai", """run --config '{"user_simulator": "llm"}'""", 2,
        "user_simulator llm needs agent openai"),
    bad("run-worker-unknown", "run --worker gpu", 2, "--worker: must be 'none', 'cpu' or 'vllm', got 'gpu'"),
    bad("run-worker-with-endpoint", "run --worker cpu --endpoint http://127.0.0.1:8000/v1", 2,
        "worker cpu serves its own endpoint: drop endpoint (--endpoint)"),
    bad("run-worker-vllm-with-endpoint", "run --worker vllm --model-path /m --endpoint http://127.0.0.1:8000/v1", 2,
        "worker vllm serves its own endpoint"),
    bad("run-worker-vllm-without-model-path", "run --worker vllm", 2,
        "worker vllm needs model_path (--model-path, a model directory or name)"),
    bad("run-worker-with-perturb-agent", "run --worker vllm --model-path /m --agent perturb:extra_calls", 2,
        "worker vllm serves a model for agent openai, not agent perturb:extra_calls"),
    bad("run-worker-cpu-other-model", "run --worker cpu --model llama-70b", 2,
        "worker cpu serves smollm2-135m-instruct: drop model 'llama-70b' (--model)"),
    bad("run-model-path-without-worker", "run --model-path /m", 2, "model_path needs a worker"),
    bad("run-worker-vllm-not-installed", "run --worker vllm --model-path /m --limit 1 --no-track", 1,
        "--worker vllm needs vLLM's `vllm` command on PATH"),
    bad("run-worker-cpu-gguf-missing", "run --worker cpu --model-path $state/none.gguf --limit 1 --no-track", 2,
        "--model-path: $state/none.gguf is not a GGUF file"),
    bad("run-testset-unknown", "run --testset v99 --limit 1 --no-track", 1, "release manifest not found"),
    bad("run-task-file-corrupt", "run --limit 1 --no-track", 1, "Invalid JSON", tasks=TASK_NOT_JSON),
    bad("run-unreachable-server", "run --limit 1 --no-track", 1, "cannot connect", env=DOWN),
    bad("run-mlflow-unreachable", "run --limit 1", 1, "MLflow at http://127.0.0.1:"),
    bad("run-state-dir-is-a-file", "run --limit 1 --no-track", 1, "$state is not a directory",
        state=state_is_a_file),
    # run-shard
    bad("run-shard-unknown-run", "run-shard nope --shard 0", 1, "run 'nope' not found in the results store"),
    bad("run-shard-missing-shard", "run-shard $planned", 2, "Missing option '--shard'"),
    bad("run-shard-negative", "run-shard $planned --shard -1", 2, "'--shard'"),
    bad("run-shard-beyond-plan", "run-shard $planned --shard 2", 2, "--shard: run $planned has shards 0..1, got 2"),
    bad("run-shard-unreachable-server", "run-shard $planned --shard 0", 1, "cannot connect", env=DOWN),
    bad("run-shard-task-file-corrupt", "run-shard $planned --shard 0", 1, "Invalid JSON", tasks=TASK_NOT_JSON),
    # score / report / compare
    bad("score-unknown-run", "score nope", 1, "run 'nope' not found"),
    bad("score-missing-run", "score", 2, "Missing argument 'run_id'"),
    bad("score-run-not-executed", "score $planned", 1, "1 of 1 planned instances are not recorded",
        subprocess=True),
    bad("score-unreachable-server", "score $run", 1, "cannot connect", env=DOWN),
    bad("score-mlflow-unreachable", "score $run --track", 1, "MLflow at http://127.0.0.1:"),
    bad("score-task-file-corrupt", "score $run", 1, "Invalid JSON", tasks=TASK_NOT_JSON),
    bad("report-unknown-run", "report nope", 1, "run 'nope' not found"),
    bad("report-run-not-executed", "report $planned", 1, "not recorded"),
    bad("report-extra-argument", "report $run again", 2, "unexpected extra argument"),
    bad("leaderboard-runs-and-name", "leaderboard $run --name eval", 2, "--name: give run ids or --name, not both"),
    bad("leaderboard-run-unknown", "leaderboard nope", 1, "run 'nope' not found"),
    bad("compare-second-run-unknown", "compare $run nope", 1, "run 'nope' not found"),
    bad("compare-first-run-unknown", "compare nope $run", 1, "run 'nope' not found"),
    bad("compare-with-a-run-not-executed", "compare $run $planned", 1, "not recorded"),
    bad("compare-missing-argument", "compare $run", 2, "Missing argument 'run_b'"),
    # quantize ($model: a model directory with a config.json and nothing else)
    bad("quantize-missing-model-path", "quantize --output $state/q", 2, "Missing option '--model-path'"),
    bad("quantize-not-a-model-directory", "quantize --model-path $state --output $state/q", 1,
        "--model-path: $state is not a model directory (no config.json)"),
    bad("quantize-output-not-empty", "quantize --model-path $model --output $state", 1,
        "--output: $state exists and is not an empty directory"),
    bad("quantize-unknown-method", "quantize --model-path $model --output $state/q --method gptq", 2, "'--method'"),
    bad("quantize-zero-samples", "quantize --model-path $model --output $state/q --samples 0", 2, "'--samples'"),
    bad("quantize-more-samples-than-questions", "quantize --model-path $model --output $state/q --samples 99999", 1,
        "--samples: 99999 is more than the"),
    bad("quantize-unknown-testset", "quantize --model-path $model --output $state/q --testset v9", 1, "v9"),
    bad("quantize-without-gpu-packages", "quantize --model-path $model --output $state/q", 1,
        "quantize --method llm-compressor needs llmcompressor, torch, transformers and a CUDA GPU", subprocess=True),
]  # fmt: skip


# --- the world the commands run in ------------------------------------------------------------


@dataclass(frozen=True)
class World:
    settings: Settings  # what the CLI sees: the session cluster as an external server
    env: dict[str, str]
    names: dict[str, str]


def candidate(task: Task, ticket: int, decisions: list[Decision], released_in: str | None = None) -> Candidate:
    new = task.model_copy(update={"id": f"st-ticket_{ticket}-001"})
    drafts = [Wording(language=v.language, complexity=v.complexity, drafted_by="model m") for v in task.variants]
    return Candidate(
        month=QUEUE_MONTH, ticket_id=ticket, pattern=f"pattern {ticket}", task=new, decisions=decisions,
        released_in=released_in, wordings=drafts,
    )  # fmt: skip


def write_queue(tasks: Path) -> dict[str, str]:
    """A review queue with one pending, one approved and one released candidate."""
    task = Task.model_validate_json(task_file(tasks).read_text(encoding="utf-8"))
    yes = [Decision(decision="approve", reviewer="ana", role="clinician", at="2026-10-02T09:00:00+00:00")]
    queue = {
        "pending": candidate(task, TICKETS["pending"], []),
        "approved": candidate(task, TICKETS["approved"], yes),
        "released": candidate(task, TICKETS["released"], yes, released_in="v1"),
    }
    for c in queue.values():
        path = queue_file(tasks, c.ticket_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(c.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return {name: c.task.id for name, c in queue.items()}


@pytest.fixture(scope="module")
def world(settings: Settings, synced: SyncReport, tmp_path_factory: pytest.TempPathFactory) -> World:
    """A copy of test set v1 with a review queue, a state directory with one executed and one planned
    run, and an MLflow address where nothing answers."""
    root = tmp_path_factory.mktemp("bad-input")
    tasks, state = root / "tasks", root / "state"
    shutil.copytree(PROJECT_ROOT / "tasks" / "v1", tasks / "v1")
    shutil.copy(PROJECT_ROOT / "tasks" / "CHANGELOG.md", tasks / "CHANGELOG.md")
    names = write_queue(tasks)
    state.mkdir()
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    names["model"] = str(model)
    mlflow = f"http://127.0.0.1:{free_port()}"
    cli = Settings(state_dir=state, pg_url=settings.admin_url, mlflow_uri=mlflow, tasks_dir=tasks)
    small = {"testset_version": "v1", "limit": 1, "languages": ["zh"], "complexities": ["plain"]}
    names["run"] = run_all(cli, RunConfig(name="complete", **small), track=False)["run_id"]
    names["planned"] = plan_run(cli, RunConfig(name="planned", shards=2, **small))
    env = {
        "EVALPKG_PG_URL": settings.admin_url,
        "EVALPKG_STATE_DIR": str(state),
        "EVALPKG_TASKS_DIR": str(tasks),
        "EVALPKG_MLFLOW_URI": mlflow,
    }
    return World(cli, env, names)


def tree(path: Path) -> dict[str, str]:
    """Every file's sha256 and every folder's mode under `path` (or the file itself)."""
    if not path.exists():
        return {}
    items = [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else oct(p.stat().st_mode)
        for p in items
    }


def databases(settings: Settings) -> dict[str, list[Any]]:
    out = {}
    for database, queries in STATE_QUERIES.items():
        with connect(settings.db_url(database)) as conn:
            out[database] = [conn.execute(q).fetchall() for q in queries]
    return out


def snapshot(settings: Settings, tasks: Path, state: Path) -> dict[str, Any]:
    return {"databases": databases(settings), "tasks": tree(tasks), "state": tree(state)}


# --- running the CLI --------------------------------------------------------------------------


def in_process(args: list[str], env: Env, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> tuple[Any, str]:
    for key in [k for k in os.environ if k.startswith("EVALPKG_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["evalpkg", *args])
    capsys.readouterr()
    previous = signal.getsignal(signal.SIGINT)  # main() ignores Ctrl-C once a command is done
    try:
        with pytest.raises(SystemExit) as stop:
            main()
    finally:
        signal.signal(signal.SIGINT, previous)
    return stop.value.code, capsys.readouterr().err


def in_subprocess(args: list[str], env: Env) -> tuple[Any, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EVALPKG_")}
    full = {**base, **{k: v for k, v in env.items() if v is not None}}
    for key in [k for k, v in env.items() if v is None]:
        full.pop(key, None)
    proc = subprocess.run(
        [sys.executable, "-m", "evalpkg", *args], env=full, capture_output=True, text=True, timeout=120, check=False
    )
    return proc.returncode, proc.stderr


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for p in [tmp_path, *tmp_path.rglob("*")]:  # a locked folder must not stop the clean-up
        if p.is_dir():
            p.chmod(0o755)


def arrange(case: Bad, world: World, scratch: Path) -> tuple[Env, Path, Path]:
    """The case's environment, tasks tree and state directory (copies where the case breaks them)."""
    env: Env = {**world.env, **case.env}
    tasks, state = world.settings.tasks_dir, world.settings.state_dir
    if case.tasks is not None:
        tasks = scratch / "tasks"
        shutil.copytree(world.settings.tasks_dir, tasks)
        case.tasks(tasks)
        env["EVALPKG_TASKS_DIR"] = str(tasks)
    if case.state is not None:
        state = case.state(scratch)
        env["EVALPKG_STATE_DIR"] = str(state)
        env.setdefault("EVALPKG_PG_PORT", str(free_port()))
    tasks = Path(env["EVALPKG_TASKS_DIR"] or tasks)
    return env, tasks, state


@pytest.mark.parametrize("case", CASES)
def test_bad_input(
    case: Bad, world: World, scratch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env, tasks, state = arrange(case, world, scratch)
    names = {**world.names, "state": str(state)}
    args = shlex.split(Template(case.args).substitute(names))
    before = snapshot(world.settings, tasks, state)
    code, stderr = in_subprocess(args, env) if case.subprocess else in_process(args, env, monkeypatch, capsys)
    assert snapshot(world.settings, tasks, state) == before, stderr  # nothing half-written
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("evalpkg: error: "), stderr
    assert "internal error" not in lines[0], stderr  # an exception nobody turned into a message
    assert Template(case.says).substitute(names) in lines[0]
    assert code == case.code, stderr


def test_bad_input_cases_cover_every_command() -> None:
    import typer

    from evalpkg.cli import app

    def commands(group: Any, prefix: str = "") -> set[str]:
        out = set()
        for name, cmd in group.commands.items():
            out |= commands(cmd, f"{prefix}{name} ") if hasattr(cmd, "commands") else {prefix + name}
        return out

    tried = {" ".join(shlex.split(p.values[0].args)[:2]) for p in CASES} | {
        shlex.split(p.values[0].args)[0] for p in CASES
    }
    missing = commands(typer.main.get_command(app)) - tried
    assert not missing, f"commands without a bad-input case: {sorted(missing)}"
    assert len(CASES) >= 60
    assert len({p.id for p in CASES}) == len(CASES)
