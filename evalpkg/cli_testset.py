"""`evalpkg testset ...`: build, validate, inspect and refresh the benchmark's test set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from evalpkg import cli_review
from evalpkg.errors import DataError, UsageError
from evalpkg.progress import to_stderr
from evalpkg.settings import Settings, get_settings

if TYPE_CHECKING:
    from evalpkg.agent.plan.gold import GoldPlanCheck
    from evalpkg.testset.models import Task

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The benchmark test set (tasks/<version>/).")


@app.command()
def build(seed: Annotated[int, typer.Option(help="parameter sampling seed")] = 1) -> None:
    """Freeze the templates into release v1, checked against the current eval snapshot."""
    from evalpkg.testset.build import build_release, export_schema

    settings = get_settings()
    rel = build_release(settings, seed=seed, progress=to_stderr)
    export_schema(settings)
    to_stderr(f"wrote {rel.root} ({len(rel.tasks)} tasks)")


@app.command()
def validate(
    version: Annotated[str | None, typer.Argument(help="e.g. v1; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every trap that does not bite and every failed premise")] = False,
    reference_worlds: Annotated[
        bool, typer.Option(help="validate in each reference world instead (scratch cluster; takes minutes)")
    ] = False,
) -> None:
    """Schema, manifest, uniqueness, coverage, every gold SQL, trap mutations and premises on the current eval
    snapshot, where trap bites, premises and what golds find (rows, ties) are reported; with --reference-worlds,
    in the worlds a release makes its claims for, where they fail releases from v4 on."""
    from evalpkg.testset import release
    from evalpkg.testset.validate import raise_on_problems, validate_reference
    from evalpkg.testset.validate import validate as run

    settings = get_settings()
    if not reference_worlds:
        report = run(settings, version, progress=to_stderr)
        for line in report.findings() if findings else []:
            typer.echo(line)
        checks = _gold_plans(settings, release.load(settings.tasks_dir, version).tasks)
        report.problems += [f"{c.task.id}: gold plan: {c.reason}" for c in checks if c.reason and c.plan is not None]
        for c in checks if findings else []:
            if c.reason and c.plan is None:
                typer.echo(f"{c.task.id}: no gold plan: {c.reason}")
        to_stderr(raise_on_problems(report).summary())
        return
    reports = validate_reference(settings, version, progress=to_stderr)
    for world, report in reports:
        for line in report.findings() if findings else []:
            typer.echo(f"[{world.label()}] {line}")
        to_stderr(f"[{world.label()}] {report.summary()}")
    if failed := [(w, r) for w, r in reports if r.problems]:
        w, r = failed[0]
        raise DataError(
            f"{len(failed)} of {len(reports)} reference worlds have problems; first, in {w.label()}: {r.problems[0]}"
        )


@app.command()
def stats(version: Annotated[str | None, typer.Argument()] = None) -> None:
    """Counts per type x difficulty, tag, language; trap bite rate per tag and premise findings on the snapshot."""
    from collections import Counter

    from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
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
    with agent_connection(get_settings()) as conn:
        snapshot = snapshot_version(conn)
    with gold_runner(get_settings()) as golds:
        outcomes, findings = discrimination(golds, rel.tasks)
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
    from evalpkg.sql.gold import agent_connection, gold_runner

    with agent_connection(settings) as conn:
        catalog = Catalog.load(conn)
    with gold_runner(settings) as golds:
        return check_gold_plans(tasks, catalog, golds)


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
    build: Annotated[
        bool, typer.Option("--build/--list", help="build the missing ones (two at a time: six in 2.5 min on 2 cores)")
    ] = True,
) -> None:
    """The reference worlds, kept under the state directory: runs score in each of them too
    (semantic_accuracy; the first run builds the missing ones), and `validate --reference-worlds` checks
    the release's claims there."""
    from evalpkg.testset import worlds as reference

    settings = get_settings()
    ready = set(reference.built(settings))
    if build:
        for world, _ in reference.each(
            settings, tuple(w for w in reference.WORLDS if w not in ready), progress=to_stderr
        ):
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
    tried = run(
        settings, Path(file), reference=reference.WORLDS if reference_worlds else (), seed=seed, progress=to_stderr
    )
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
    to_stderr(f"{len(tried)} template(s), {made}/{sum(o.template.count for o in tried)} tasks made, {bad} problem(s)")
    if bad:
        raise typer.Exit(1)


@app.command("audit-scorer")
def audit_scorer(
    version: Annotated[str | None, typer.Argument(help="e.g. v6; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every task a transform fails on")] = False,
) -> None:
    """Re-lay-out every gold result as a grader accepts it and change it as a grader rejects it; score each.

    Exits 1 where a layout is rejected or a mutation accepted."""
    from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
    from evalpkg.testset import release
    from evalpkg.testset.audit import audit, summary

    settings = get_settings()
    rel = release.load(settings.tasks_dir, version)
    with agent_connection(settings) as conn:
        snapshot = snapshot_version(conn)
    with gold_runner(settings) as golds:
        results = audit(rel.tasks, golds, progress=to_stderr)
    typer.echo(f"{rel.version}: the scorer on its own golds ({len(rel.tasks)} tasks, snapshot {snapshot})")
    for line in summary(results):
        typer.echo(line)
    failed = [r for r in results if r.failures]
    for r in failed if findings else []:
        typer.echo(f"{r.name}: " + ", ".join(r.failures))
    if failed:
        raise typer.Exit(1)


@app.command("study-draw")
def study_draw(
    seed: Annotated[int, typer.Option(help="the draw's seed, recorded with the sample")],
    size: Annotated[int, typer.Option(min=1, help="tasks, one per template")] = 40,
    version: Annotated[str | None, typer.Option(help="the release; default: latest")] = None,
    include_studied: Annotated[
        bool, typer.Option(help="draw from templates of the release's earlier samples too")
    ] = False,
) -> None:
    """Draw a blind-reader sample: tasks/study/<version>-seed<N>/packet.json (questions only, for readers)
    and key.json (which task each is; kept from readers). Templates of the release's earlier samples are
    left out: the scorer may have been fixed for their layouts."""
    from evalpkg.testset import release
    from evalpkg.testset.study import draw, studied_templates, write_sample

    settings = get_settings()
    rel = release.load(settings.tasks_dir, version)
    folder = settings.tasks_dir / "study" / f"{rel.version}-seed{seed}"
    studied = set() if include_studied else studied_templates(folder, rel.tasks)
    packet, key = draw(rel.tasks, rel.version, size, seed, studied)
    write_sample(folder, packet, key)
    followups = sum(len(t.followups) for t in packet.tasks)
    typer.echo(f"{folder}: {len(packet.tasks)} tasks ({followups} follow-up questions); give readers packet.json only")


@app.command("study-measure")
def study_measure(
    sample: Annotated[str, typer.Argument(help="the sample's folder (tasks/study/<version>-seed<N>)")],
    answers: Annotated[list[str], typer.Option("--answers", help="a reader's answers (JSON); repeat per reader")],
    reference_worlds: Annotated[bool, typer.Option(help="measure in every reference world too")] = True,
) -> None:
    """Each reader's SQL against the gold, on the snapshot and in every reference world; lists each
    disagreement with its verdict from verdicts.json (judged by a maintainer) and the FN and FP per reader."""
    from pathlib import Path

    from evalpkg.testset import worlds
    from evalpkg.testset.study import measure, save_results, verdict_counts

    folder = Path(sample)
    reference = worlds.WORLDS if reference_worlds else ()
    results = measure(get_settings(), folder, [Path(a) for a in answers], reference, progress=to_stderr)
    save_results(folder, results)
    counts = verdict_counts(folder, results)
    for r in results:
        agree = len(r.agreement) - len(r.disagreements())
        c = counts[r.reader]
        typer.echo(
            f"{r.reader}: agrees with the gold on {agree}/{len(r.agreement)} tasks in all {len(r.worlds)} worlds; "
            f"scorer FN {c['scorer_fn']}, FP {c['scorer_fp']}; "
            + ", ".join(f"{v} {n}" for v, n in sorted(c.items()) if v not in ("scorer_fn", "scorer_fp"))
        )
        for ref in r.disagreements():
            where = sum(a < 1.0 for a in r.agreement[ref])
            typer.echo(f"  {ref}: disagrees in {where}/{len(r.worlds)} worlds; {r.details[ref][:160]}")


@app.command("audit-leaks")
def audit_leaks() -> None:
    """Search every table the agents' role can read for an answer key: a text that is the gold of a task of
    any release, or a ticket's SQL (the same query, formatting aside). Exits 1 on any; lists queries of the
    same shape with other literals apart."""
    from evalpkg.testset import release
    from evalpkg.testset.leaks import audit_agent_readable, gold_queries, ticket_queries

    settings = get_settings()
    tasks = [t for v in release.versions(settings.tasks_dir) for t in release.load(settings.tasks_dir, v).tasks]
    answers = {**ticket_queries(settings), **gold_queries(tasks)}
    result = audit_agent_readable(settings, answers)
    typer.echo(f"the agents' role reads {len(result.tables)} tables: {', '.join(result.tables)}")
    typer.echo(
        f"{result.texts} stored texts that look like a query, compared with {len(answers)} answers "
        f"(golds of {len(tasks)} tasks in every release, and the ticket log's SQL): {len(result.leaks)} leaks"
    )
    for leak in result.leaks:
        typer.echo(f"leak: {leak}")
    for similar in result.similar:
        typer.echo(f"same shape, not a leak: {similar}")
    if result.leaks:
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
    to_stderr(f"{a} -> {b}: {len(changes.added)} added, {len(changes.changed)} changed, {len(changes.removed)} removed")


@app.command()
def changes(
    version: Annotated[str | None, typer.Argument(help="e.g. v7; default: latest")] = None,
    kind: Annotated[str | None, typer.Option(help="only these: added, changed or removed")] = None,
) -> None:
    """A release's per-task records (tasks/<version>/changes.json): each task it added, changed or removed,
    and why."""
    from evalpkg.testset import release

    if kind is not None and kind not in release.KINDS:
        raise UsageError(f"--kind: must be {', '.join(release.KINDS[:-1])} or {release.KINDS[-1]}, got {kind!r}")
    tasks_dir = get_settings().tasks_dir
    record = release.read_changes(tasks_dir, version or release.latest(tasks_dir))
    entry = record.change_set()
    for each in release.KINDS:
        for tid, why in entry.of_kind(each).items() if kind in (None, each) else ():
            typer.echo(f"{each:<8} {tid}  {why}")
    counts = ", ".join(f"{len(entry.of_kind(each))} {each}" for each in release.KINDS)
    to_stderr(f"{record.version} ({record.released}): {counts}")


@app.command()
def readings(version: Annotated[str | None, typer.Argument(help="e.g. v11; default: latest")] = None) -> None:
    """The alternative-gold audit: each template whose alternative golds read a rule of the dictionary (report
    status, voided orders, a glucose cut-off, an age) otherwise than its first gold, how many, and the recorded
    reason; then every problem (exit 1): a gold the dictionary rules out, a difference without a reason, a stale
    reason, a graded turn that repeats another's."""
    from evalpkg.testset import readings as audit
    from evalpkg.testset import release

    tasks_dir = get_settings().tasks_dir
    rel = release.load(tasks_dir, version or release.latest(tasks_dir))
    for template, rule, n, why in audit.table(rel.tasks):
        typer.echo(f"{template:<40} {rule:<14} {n:>3}  {why}")
    problems = audit.problems(rel.tasks, rel.version)
    for line in problems:
        typer.echo(f"problem: {line}")
    held = "" if audit.held(rel.version) else f" (not held: before {audit.READINGS_FROM})"
    to_stderr(
        f"{rel.version}: {len(audit.alternatives(rel.tasks))} alternative golds, {len(problems)} problem(s){held}"
    )
    if problems:
        raise typer.Exit(1)


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="the latest release, e.g. v2")],
    reason: Annotated[str, typer.Option(help="why the templates were reworded, for the CHANGELOG")] = "",
) -> None:
    """Next release = SOURCE with each task re-rendered from its template (outputs, variant asks, reworded
    texts); tasks whose parameters the template withdraws are removed."""
    from evalpkg.testset.migrate import migrate as run

    rel, plan = run(get_settings(), source, reason=reason, progress=to_stderr)
    to_stderr(f"released {rel.version}: {plan.summary()}")


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

    rel, plan = run(get_settings(), source, per_template=per_template, progress=to_stderr)
    to_stderr(f"released {rel.version}: {plan.summary()}")


cli_review.register(app)
