"""`evalpkg testset ...`: build, validate, inspect and refresh the benchmark's test set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from evalpkg.errors import DataError, UsageError
from evalpkg.settings import Settings, get_settings

if TYPE_CHECKING:
    from evalpkg.agent.plan.gold import GoldPlanCheck
    from evalpkg.testset.models import Task

app = typer.Typer(no_args_is_help=True, help="The benchmark test set (tasks/<version>/).")


def _log(message: str) -> None:
    typer.echo(message, err=True)


@app.command()
def build(seed: Annotated[int, typer.Option(help="parameter sampling seed")] = 1) -> None:
    """Freeze the templates into release v1, checked against the current eval snapshot."""
    from evalpkg.testset.build import build_release, export_schema

    settings = get_settings()
    rel = build_release(settings, seed=seed, progress=_log)
    export_schema(settings)
    _log(f"wrote {rel.root} ({len(rel.tasks)} tasks)")


@app.command()
def validate(
    version: Annotated[str | None, typer.Argument(help="e.g. v1; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every trap that does not bite and every failed premise")] = False,
    reference_worlds: Annotated[
        bool, typer.Option(help="validate in each reference world instead (scratch cluster; takes minutes)")
    ] = False,
) -> None:
    """Schema, manifest, uniqueness, coverage, every gold SQL, trap mutations and premises on the current eval
    snapshot, where trap bites and premises are reported; with --reference-worlds, in the worlds a release
    makes its claims for, where they fail releases from v4 on."""
    from evalpkg.testset import release
    from evalpkg.testset.validate import raise_on_problems, validate_reference
    from evalpkg.testset.validate import validate as run

    settings = get_settings()
    if not reference_worlds:
        report = run(settings, version, progress=_log)
        for line in report.findings() if findings else []:
            typer.echo(line)
        checks = _gold_plans(settings, release.load(settings.tasks_dir, version).tasks)
        report.problems += [f"{c.task.id}: gold plan: {c.reason}" for c in checks if c.reason and c.plan is not None]
        for c in checks if findings else []:
            if c.reason and c.plan is None:
                typer.echo(f"{c.task.id}: no gold plan: {c.reason}")
        _log(raise_on_problems(report).summary())
        return
    reports = validate_reference(settings, version, progress=_log)
    for world, report in reports:
        for line in report.findings() if findings else []:
            typer.echo(f"[{world.label()}] {line}")
        _log(f"[{world.label()}] {report.summary()}")
    if failed := [(w, r) for w, r in reports if r.problems]:
        w, r = failed[0]
        raise DataError(
            f"{len(failed)} of {len(reports)} reference worlds have problems; first, in {w.label()}: {r.problems[0]}"
        )


@app.command()
def stats(version: Annotated[str | None, typer.Argument()] = None) -> None:
    """Counts per type x difficulty, tag, language; trap bite rate per tag and premise findings on the snapshot."""
    from collections import Counter

    from evalpkg.testset import release, traps
    from evalpkg.testset.models import Difficulty, TaskType
    from evalpkg.testset.validate import discrimination
    from evalpkg.testset.validate import stats as compute

    rel = release.load(get_settings().tasks_dir, version)
    s = compute(rel.tasks)
    typer.echo(f"{rel.version}: {len(rel.tasks)} tasks (snapshot {rel.manifest.snapshot_version})")
    typer.echo(f"{'type':<16}" + "".join(f"{d.value:>8}" for d in Difficulty) + f"{'total':>8}")
    for t in TaskType:
        row = [s["cell"][f"{t.value} x {d.value}"] for d in Difficulty]
        typer.echo(f"{t.value:<16}" + "".join(f"{n:>8}" for n in row) + f"{sum(row):>8}")
    for name in ("tag", "language", "variants_per_task", "source"):
        typer.echo(f"{name}: " + ", ".join(f"{k}={v}" for k, v in sorted(s[name].items())))
    _shapes(rel.tasks)
    snapshot, outcomes, findings = discrimination(get_settings(), rel.tasks)
    typer.echo(f"trap bite rate on snapshot {snapshot} (bitten/applicable; tasks tagged):")
    for tag, rate in traps.rates(outcomes).items():
        typer.echo(f"  {tag:<16} {rate.summary():<24} {rate.tasks:>4}")
    by_check = Counter(f.check for f in findings)
    typer.echo(f"premise findings: {len(findings)}" + "".join(f", {k}={v}" for k, v in sorted(by_check.items())))
    reviews = [t.review for t in rel.tasks]
    two = [r for r in reviews if len({a.id for a in r.annotators}) >= 2]
    if two:
        full, mean = sum(r.agreement == 1.0 for r in two), sum(r.agreement for r in two) / len(two)
        arbitrated = Counter((r.arbitration or "").split(" ", 1)[0] for r in two if r.arbitration)
        typer.echo(
            f"review: {len(two)} of {len(reviews)} tasks annotated twice; measured agreement before arbitration: "
            f"{full} ({full / len(two):.1%}) agree on every non-technical variant, mean {mean:.3f}; arbitrated "
            f"{sum(arbitrated.values())}: " + ", ".join(f"{k}={v}" for k, v in sorted(arbitrated.items()))
        )
    else:
        typer.echo(f"review: no task annotated twice ({len(reviews)} with the generator's record only)")
    _remeasured_agreement()
    _plan_coverage(_gold_plans(get_settings(), rel.tasks))


def _shapes(tasks: list[Task]) -> None:
    """How many question shapes the release has: templates per type x difficulty, tasks per template,
    and the tasks with follow-up turns graded on their own."""
    from collections import Counter

    from evalpkg.testset.models import Difficulty, TaskType

    per_template = Counter(t.provenance.template_id for t in tasks if t.provenance.template_id)
    cell_of = {t.provenance.template_id: (t.type, t.difficulty) for t in tasks if t.provenance.template_id}
    cells = Counter(cell_of.values())
    typer.echo(f"templates: {len(per_template)}, per type x difficulty (least {min(cells.values(), default=0)}):")
    for kind in TaskType:
        row = [cells[(kind, d)] for d in Difficulty]
        typer.echo(f"  {kind.value:<16}" + "".join(f"{n:>8}" for n in row) + f"{sum(row):>8}")
    if per_template:
        most = per_template.most_common(1)[0]
        typer.echo(
            f"tasks per template: mean {sum(per_template.values()) / len(per_template):.1f}, most {most[1]} "
            f"({most[0]}); ticket tasks {sum(t.provenance.source == 'ticket' for t in tasks)}"
        )
    followups = Counter(t.type.value for t in tasks if len(t.graded_turns()) > 1)
    typer.echo(
        f"follow-up tasks (a later turn graded on its own): {sum(followups.values())}"
        + "".join(f", {k}={v}" for k, v in sorted(followups.items()))
    )


def _gold_plans(settings: Settings, tasks: list[Task]) -> list[GoldPlanCheck]:
    """Each answerable task's gold plan compiled and graded on the snapshot (the plan strategy's oracle)."""
    from evalpkg.agent.plan.gold import check_gold_plans
    from evalpkg.agent.schema import Catalog
    from evalpkg.testset.gold import agent_connection
    from evalpkg.testset.validate import gold_executor

    with agent_connection(settings) as conn:
        catalog = Catalog.load(conn)
    executor = gold_executor(settings)
    try:
        return check_gold_plans(tasks, catalog, executor)
    finally:
        executor.close()


def _plan_coverage(checks: list[GoldPlanCheck]) -> None:
    from evalpkg.agent.plan.gold import coverage

    shares = ", ".join(f"{t}={ok}/{n} ({ok / n:.0%})" for t, (ok, n) in coverage(checks).items() if n)
    typer.echo(f"gold plans whose compiled SQL matches the gold (answerable tasks): {shares}")
    for c in checks:
        if c.reason:
            typer.echo(f"  {c.task.id}: {c.reason}")


def _remeasured_agreement() -> None:
    """The second annotations measured again by today's comparator, and the arbitrations that upheld a
    gold for layout alone among the tasks that still disagree."""
    from evalpkg.grading.comparator import COMPARATOR_VERSION
    from evalpkg.testset.annotate import decisions, remeasured

    settings = get_settings()
    upheld = {k for k, d in decisions(settings.tasks_dir).items() if d.outcome == "gold_upheld" and LAYOUT in d.note}
    for measured in remeasured(settings):
        mine = measured.annotated()
        n, agree = len(mine), sum(t.agreement == 1.0 for t in mine)
        still = sum(t.task_id in upheld for t in measured.disagreements())
        typer.echo(
            f"second annotation {measured.annotator.id} re-measured on comparator v{COMPARATOR_VERSION} against "
            f"{measured.version} (before arbitration): {agree} of {n} ({agree / n:.1%}) agree on every non-technical "
            "variant; gold upheld as "
            f"'{LAYOUT}' where they still disagree: {still}"
        )


LAYOUT = "same counts in another layout"  # how an arbitration upholding a gold for layout alone reads


@app.command()
def worlds(
    build: Annotated[bool, typer.Option("--build/--list", help="build the missing ones (a minute or two each)")] = True,
) -> None:
    """The reference worlds, kept under the state directory: runs score in each of them too
    (semantic_accuracy), and `validate --reference-worlds` checks the release's claims there."""
    from evalpkg.testset import worlds as reference

    settings = get_settings()
    ready = set(reference.built(settings))
    if build:
        for world, _ in reference.each(settings, tuple(w for w in reference.WORLDS if w not in ready), progress=_log):
            ready.add(world)
    for world in reference.WORLDS:
        state = "built" if world in ready else "not built"
        typer.echo(f"{world.label():<36} {state:<10} {reference.home(settings, world)}")


@app.command("try-templates")
def try_templates(
    file: Annotated[str, typer.Argument(help="a template file (same format as templates_v1.json)")],
    reference_worlds: Annotated[
        bool, typer.Option(help="also hold the made tasks to a release's claims in each reference world")
    ] = False,
    seed: Annotated[int, typer.Option(help="parameter sampling seed, as for build")] = 1,
) -> None:
    """Check one template file end to end without cutting a release: fill each template on the README world
    as build does, compile each gold plan, and with --reference-worlds check trap bites and premises in each
    world. Exits 1 on any problem."""
    from pathlib import Path

    from evalpkg.testset import worlds as reference
    from evalpkg.testset.try_templates import README_WORLD, Problem
    from evalpkg.testset.try_templates import try_templates as run

    settings = get_settings()
    tried = run(settings, Path(file), reference=reference.WORLDS if reference_worlds else (), seed=seed, progress=_log)
    for one in tried:  # every graded turn's gold plan, follow-ups' too
        turns = [task.turn_task(i) for task in one.tasks for i in task.graded_turns()]
        one.problems += [
            Problem(c.task.id, README_WORLD, f"gold plan: {c.reason}") for c in _gold_plans(settings, turns) if c.reason
        ]
    for one in tried:
        typer.echo(one.summary())
        for problem in one.problems:
            typer.echo(f"  {problem.line()}")
    bad = sum(len(one.problems) for one in tried)
    made = sum(len(one.tasks) for one in tried)
    _log(f"{len(tried)} template(s), {made}/{sum(o.template.count for o in tried)} tasks made, {bad} problem(s)")
    if bad:
        raise typer.Exit(1)


@app.command("audit-scorer")
def audit_scorer(
    version: Annotated[str | None, typer.Argument(help="e.g. v6; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every task a transform fails on")] = False,
) -> None:
    """Re-lay-out every gold result as a grader accepts it and change it as a grader rejects it; score each.

    Exits 1 where a layout is rejected or a mutation accepted."""
    from evalpkg.testset import release
    from evalpkg.testset.audit import audit, summary
    from evalpkg.testset.gold import agent_connection, snapshot_version
    from evalpkg.testset.validate import gold_executor

    settings = get_settings()
    rel = release.load(settings.tasks_dir, version)
    with agent_connection(settings) as conn:
        snapshot = snapshot_version(conn)
    executor = gold_executor(settings)
    try:
        results = audit(rel.tasks, executor, progress=_log)
    finally:
        executor.close()
    typer.echo(f"{rel.version}: the scorer on its own golds ({len(rel.tasks)} tasks, snapshot {snapshot})")
    for line in summary(results):
        typer.echo(line)
    failed = [r for r in results if r.failures]
    for r in failed if findings else []:
        typer.echo(f"{r.name}: " + ", ".join(r.failures))
    if failed:
        raise typer.Exit(1)


@app.command()
def diff(a: str, b: str) -> None:
    """Tasks added, changed and removed between two releases."""
    from evalpkg.testset import release

    tasks_dir = get_settings().tasks_dir
    changes = release.diff(release.load(tasks_dir, a), release.load(tasks_dir, b))
    for title, items in (("added", changes.added), ("changed", changes.changed), ("removed", changes.removed)):
        for tid, why in items.items():
            typer.echo(f"{title:<8} {tid}  {why}")
    _log(f"{a} -> {b}: {len(changes.added)} added, {len(changes.changed)} changed, {len(changes.removed)} removed")


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="the latest release, e.g. v2")],
    reason: Annotated[str, typer.Option(help="why the templates were reworded, for the CHANGELOG")] = "",
) -> None:
    """Next release = SOURCE with each task re-rendered from its template (outputs, variant asks, reworded
    texts); tasks whose parameters the template withdraws are removed."""
    from evalpkg.testset.migrate import migrate as run

    rel, plan = run(get_settings(), source, reason=reason, progress=_log)
    _log(f"released {rel.version}: {plan.summary()}")


@app.command()
def reselect(
    source: Annotated[str, typer.Option("--from", help="the latest release, e.g. v3")],
    per_template: Annotated[
        int | None, typer.Option(min=1, help="at most this many tasks per template (more shapes, fewer copies)")
    ] = None,
) -> None:
    """Next release = SOURCE with every trap biting and every premise holding in the reference worlds
    (built in a scratch cluster; takes minutes): failing tasks get other parameters, tags or are dropped;
    templates added for the next release join with their tasks."""
    from evalpkg.testset.reselect import reselect as run

    rel, plan = run(get_settings(), source, per_template=per_template, progress=_log)
    _log(f"released {rel.version}: {plan.summary()}")


@app.command()
def refresh(
    month: Annotated[str, typer.Option(help="YYYY-MM of the tickets to mine")],
    auto_approve: Annotated[
        bool, typer.Option(help="approve synthetic tickets' tasks without review (their wordings still need one)")
    ] = False,
    endpoint: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL of the model that drafts the wordings")
    ] = None,
    model: Annotated[str | None, typer.Option(help="the drafting model's name (with --endpoint)")] = None,
) -> None:
    """Mine a month of query tickets into the review queue (idempotent): each a task with outputs, answer
    points and tags, its wordings drafted (by the model at --endpoint, else from the ticket) for review."""
    from evalpkg.testset.refresh import MONTH_RE
    from evalpkg.testset.refresh import refresh as run

    if not MONTH_RE.match(month):
        raise UsageError(f"--month: must be YYYY-MM (month 01..12), got {month!r}")
    if (endpoint is None) != (model is None):
        raise UsageError("--endpoint and --model: give both (the drafting model) or neither")
    drafter = None
    if endpoint is not None and model is not None:
        from evalpkg.agent.model_client import ModelClient
        from evalpkg.testset.ticket_task import ModelDrafter

        drafter = ModelDrafter(ModelClient(endpoint, max_retries=1), model)
    try:
        run(get_settings(), month, drafter=drafter, auto_approve=auto_approve, progress=_log)
    finally:
        if drafter is not None:
            drafter.client.close()


@app.command()
def review(
    ids: Annotated[list[str] | None, typer.Argument(help="candidate task ids; none: list the queue")] = None,
    approve: Annotated[bool, typer.Option("--approve/--reject")] = True,
    reviewer: Annotated[str, typer.Option()] = "",
    role: Annotated[str, typer.Option(help="clinician, analyst or dba")] = "",
    note: Annotated[str, typer.Option()] = "",
    arbitrate: Annotated[
        str | None, typer.Option(help="a task the annotators disagreed on: record --outcome for it instead")
    ] = None,
    outcome: Annotated[
        str | None, typer.Option(help="gold_upheld, gold_fixed, alternative_added, reworded or dropped")
    ] = None,
    sql: Annotated[str | None, typer.Option(help="the new gold (gold_fixed) or the added one")] = None,
    show: Annotated[bool, typer.Option(help="show the candidates named: outputs, answer points, wordings")] = False,
    wording: Annotated[
        str | None, typer.Option(help="approve this wording of the one candidate named (e.g. en/plain)")
    ] = None,
    text: Annotated[str | None, typer.Option(help="with --wording: the reviewer's own text, approved")] = None,
) -> None:
    """Record approve/reject decisions (with reviewer and role), or list the queue; --show a candidate,
    --wording to approve (or with --text rewrite) one of its wordings; with --arbitrate, the outcome for a
    task the two annotators disagreed on."""
    from evalpkg.testset.refresh import load_queue, review_wording
    from evalpkg.testset.refresh import review as record

    settings = get_settings()
    if arbitrate is not None:
        _arbitrate(settings, arbitrate, outcome, reviewer, note, sql)
        return
    if not ids:
        for _, c in load_queue(settings):
            wordings = f"{len(c.task.variants) - len(c.unapproved())}/{len(c.task.variants)} wordings"
            typer.echo(f"{c.status:<9} {c.task.id:<32} {c.month}  {wordings:<13} {c.task.variants[0].text}")
        return
    if show:
        _show_candidates(settings, ids)
        return
    if not reviewer:
        raise UsageError("--reviewer: required to record a decision")
    if role not in ("clinician", "analyst", "dba"):
        raise UsageError(f"--role: must be clinician, analyst or dba, got {role!r}")
    if wording is not None:
        if len(ids) != 1:
            raise UsageError("--wording: name exactly one candidate")
        done = review_wording(settings, ids[0], wording, reviewer, role, text)  # type: ignore[arg-type]
        _log(f"{ids[0]} {done.key}: {'rewritten and ' if done.edited else ''}approved by {done.approved_by}")
        return
    decision: Literal["approve", "reject"] = "approve" if approve else "reject"
    n = record(settings, ids, decision, reviewer, role, note)  # type: ignore[arg-type]
    _log(f"recorded {decision} for {n} candidate(s)")


def _show_candidates(settings: Settings, ids: list[str]) -> None:
    from evalpkg.testset.models import Language
    from evalpkg.testset.refresh import load_queue

    queue = {c.task.id: c for _, c in load_queue(settings)}
    if unknown := [i for i in ids if i not in queue]:
        raise UsageError(f"not in the review queue: {', '.join(unknown)}")
    for c in (queue[i] for i in ids):
        t = c.task
        typer.echo(f"{t.id} ({c.status}; ticket #{c.ticket_id}, {c.month}): {t.type.value}, {t.difficulty.value}")
        typer.echo(f"  gold: {t.gold_sql[0]}")
        for o in t.outputs:
            typer.echo(f"  output {o.name} (column {o.column}): {o.meaning[Language.zh]} / {o.meaning[Language.en]}")
        typer.echo(f"  answer points: {len(t.answer_points)} number(s); tags: {', '.join(t.tags) or 'none'}")
        second = c.second_annotation
        typer.echo(
            "  second annotation: "
            + (f"{second.annotator.id}, agreement {second.agreement:.2f} ({second.detail})" if second else "none yet")
        )
        for v in t.variants:
            w = c.wording(f"{v.language.value}/{v.complexity.value}")
            state = f"approved by {w.approved_by}" if w and w.approved_by else "NOT APPROVED"
            typer.echo(
                f"  {v.language.value}/{v.complexity.value:<10} [{w.drafted_by if w else '?'}; {state}] {v.text}"
            )


def _arbitrate(
    settings: Settings, task_id: str, outcome: str | None, reviewer: str, note: str, sql: str | None
) -> None:
    from typing import get_args

    from evalpkg.testset.annotate import Outcome, arbitrate

    allowed = get_args(Outcome)
    if outcome not in allowed:
        raise UsageError(f"--outcome: must be one of {', '.join(allowed)}, got {outcome!r}")
    if not reviewer:
        raise UsageError("--reviewer: required to record a decision")
    arbitrate(settings.tasks_dir, task_id, outcome, reviewer, note, sql)  # type: ignore[arg-type]
    _log(f"recorded {outcome} for {task_id}")


@app.command()
def adjudicate(
    source: Annotated[str, typer.Option("--from", help="the latest release, annotated and arbitrated")],
) -> None:
    """Next release = SOURCE with each task's review record (both annotators, measured agreement,
    arbitration) and the arbitrated golds applied."""
    from evalpkg.testset.adjudicate import adjudicate as run

    rel, plan = run(get_settings(), source, progress=_log)
    _log(f"released {rel.version}: {plan.summary()}")


@app.command()
def annotate(
    file: Annotated[str, typer.Option("--file", help="the second annotator's SQL (JSON, see testset/annotate.py)")],
    version: Annotated[str | None, typer.Option(help="the release to compare with; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every task the annotators disagree on")] = False,
    queue: Annotated[bool, typer.Option(help="measure the review queue's candidates instead (kept on each)")] = False,
) -> None:
    """Measure a second annotator's agreement with the gold on the snapshot (comparator, per non-technical
    variant) and keep both under tasks/annotations/ (with --queue: on each candidate of the review queue)."""
    from pathlib import Path

    from evalpkg.testset.annotate import load_annotation, measure, save

    settings = get_settings()
    annotation = load_annotation(Path(file))
    if queue:
        from evalpkg.testset.refresh import annotate_queue

        for c in annotate_queue(settings, annotation, progress=_log):
            assert c.second_annotation is not None
            typer.echo(f"{c.task.id}: agreement {c.second_annotation.agreement:.2f}: {c.second_annotation.detail}")
        return
    measured = measure(settings, annotation, version, progress=_log)
    save(settings.tasks_dir, annotation, measured)
    for t in measured.disagreements() if findings else []:
        typer.echo(f"{t.task_id}: agreement {t.agreement:.2f}: {t.detail}")
    n, bad = len(measured.annotated()), len(measured.disagreements())
    _log(
        f"{annotation.annotator.id} on {measured.version}: {measured.overall():.1%} of the {n} tasks it annotated "
        f"agree on every non-technical variant; {bad} to arbitrate "
        "(`evalpkg testset review --arbitrate TASK --outcome ...`)"
    )


@app.command("release")
def release_cmd() -> None:
    """Make the next version from approved candidates, with CHANGELOG and manifest: those whose wordings
    are all approved and whose second annotation agrees, checked in every reference world as `validate
    --reference-worlds` checks a release; one that fails there is refused (exit 1), saying where and why."""
    from evalpkg.interrupts import Interrupted, held_interrupts
    from evalpkg.testset import release
    from evalpkg.testset.refresh import recover_release, release_queue

    settings = get_settings()
    tasks_dir = settings.tasks_dir
    recover_release(settings)  # release_queue does too; first here, so that the next version is known
    version = release.next_version(tasks_dir)
    # Ctrl-C: before the release dir is renamed into place nothing is left behind; from then on it waits
    # until the CHANGELOG and the review queue say so too.
    done = f"{version} was released in full (tasks, manifest, CHANGELOG, review queue) before it took effect"
    try:
        with held_interrupts(lambda: (tasks_dir / version).exists(), done):
            out = release_queue(settings, progress=_log)
    except KeyboardInterrupt as exc:
        raise Interrupted(str(exc) or f"nothing was released; {tasks_dir} is as it was") from None
    rel = out.release
    if rel is not None:
        _log(f"released {rel.version}: {len(rel.tasks)} tasks")
    else:
        _log("nothing ready to release" if out.held or out.refused else "nothing approved to release")
    if out.refused:
        tid, why = next(iter(out.refused.items()))
        raise DataError(
            f"refused {len(out.refused)} candidate(s) that fail the reference-world checks; first {tid}: {why[0]}"
        )
