"""`evalpkg testset refresh / review / annotate / adjudicate / release`: the review cycle that turns
mined tickets and second annotations into the next release."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from evalpkg.errors import DataError, UsageError
from evalpkg.progress import to_stderr
from evalpkg.settings import get_settings

if TYPE_CHECKING:
    from datetime import datetime

    from evalpkg.settings import Settings
    from evalpkg.testset.refresh_release import QueueRelease
    from evalpkg.testset.review_queue import Candidate


def register(app: typer.Typer) -> None:
    for command in (refresh, review, adjudicate, annotate):
        app.command()(command)
    app.command("release")(release_cmd)


def refresh(
    month: Annotated[str, typer.Option(help="YYYY-MM of the tickets to mine")],
    auto_approve: Annotated[
        bool, typer.Option(help="approve synthetic tickets' tasks without review (their wordings still need one)")
    ] = False,
    endpoint: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL of the model that drafts the wordings")
    ] = None,
    model: Annotated[str | None, typer.Option(help="the drafting model's name (with --endpoint)")] = None,
    reference_worlds: Annotated[
        bool,
        typer.Option(help="check each candidate in the six reference worlds as the release will (built if missing)"),
    ] = True,
) -> None:
    """Mine a month of query tickets into the review queue (idempotent): each a task with outputs, answer
    points and tags, its wordings drafted (by the model at --endpoint, else from the ticket) for review.
    Prints each dropped ticket with its reason, each trap tag removed, and the candidates queued before."""
    from evalpkg.sql.vocabulary import MONTH
    from evalpkg.testset.refresh import mine

    if not MONTH.fullmatch(month):
        raise UsageError(f"--month: must be YYYY-MM (month 01..12), got {month!r}")
    if (endpoint is None) != (model is None):
        raise UsageError("--endpoint and --model: give both (the drafting model) or neither")
    drafter = None
    if endpoint is not None and model is not None:
        from evalpkg.agent.model_client import ModelClient
        from evalpkg.testset.ticket_task import ModelDrafter

        drafter = ModelDrafter(ModelClient(endpoint, max_retries=1), model)
    try:
        report = mine(
            get_settings(),
            month,
            reference_worlds=reference_worlds,
            drafter=drafter,
            auto_approve=auto_approve,
            progress=to_stderr,
        )
        for line in report.details():
            typer.echo(line)
    finally:
        if drafter is not None:
            drafter.client.close()


# What each action of `review` reads; any other option given is a usage error, never silently dropped.
REVIEW_OPTIONS: dict[str, tuple[str, ...]] = {
    "--arbitrate": ("--arbitrate", "--outcome", "--reviewer", "--note", "--sql"),
    "--show": ("IDS", "--show"),
    "--wording": ("IDS", "--wording", "--text", "--reviewer", "--role"),
    "--wordings": ("IDS", "--wordings", "--reviewer", "--role"),
    "a decision": ("IDS", "--reject", "--reviewer", "--role", "--note"),
    "the queue's list": (),
}


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
    wordings: Annotated[
        str | None,
        typer.Option(
            help='a JSON file of the one candidate\'s wordings, {"zh/plain": "text" or null (as drafted), ...}: '
            "all approved in one command, or none"
        ),
    ] = None,
) -> None:
    """Record approve/reject decisions (with reviewer and role), or list the queue; --show a candidate,
    --wording to approve (or with --text rewrite) one of its wordings; with --arbitrate, the outcome for a
    task the two annotators disagreed on."""
    given = {
        "IDS": bool(ids),
        "--reject": not approve,
        "--reviewer": bool(reviewer),
        "--role": bool(role),
        "--note": bool(note),
        "--arbitrate": arbitrate is not None,
        "--outcome": outcome is not None,
        "--sql": sql is not None,
        "--show": show,
        "--wording": wording is not None,
        "--text": text is not None,
        "--wordings": wordings is not None,
    }
    _reject_stray_options(given)
    settings = get_settings()
    if arbitrate is not None:
        _arbitrate(settings, arbitrate, outcome, reviewer, note, sql)
    elif not ids:
        _list_queue(settings)
    elif show:
        _show_candidates(settings, ids)
    else:
        _check_reviewer(reviewer, role)
        if wordings is not None or wording is not None:
            _approve_wordings(settings, ids, reviewer, role, wording=wording, text=text, wordings_path=wordings)
        else:
            _record_decisions(settings, ids, approve, reviewer, role, note)


def _reject_stray_options(given: dict[str, bool]) -> None:
    """The first of --arbitrate, --show, --wording, --wordings given decides what `review` does (else a decision
    on the ids named, else the queue's list); an option given that it does not read is a usage error."""
    action = next((a for a in ("--arbitrate", "--show", "--wording", "--wordings") if given[a]), None)
    action = action or ("a decision" if given["IDS"] else "the queue's list")
    if stray := [o for o, on in given.items() if on and o not in REVIEW_OPTIONS[action]]:
        raise UsageError(
            f"{stray[0]}: does not apply to {action} (it takes {', '.join(REVIEW_OPTIONS[action]) or 'no option'})"
        )


def _list_queue(settings: Settings) -> None:
    from evalpkg.testset.refresh import load_queue

    for _, c in load_queue(settings):
        approved = f"{len(c.task.variants) - len(c.unapproved())}/{len(c.task.variants)} wordings"
        typer.echo(f"{c.status:<9} {c.task.id:<32} {c.month}  {approved:<13} {c.task.variants[0].text}")


def _check_reviewer(reviewer: str, role: str) -> None:
    """A decision or an approval names who made it, in which role."""
    if not reviewer:
        raise UsageError("--reviewer: required to record a decision")
    if role not in ("clinician", "analyst", "dba"):
        raise UsageError(f"--role: must be clinician, analyst or dba, got {role!r}")


def _approve_wordings(
    settings: Settings,
    ids: list[str],
    reviewer: str,
    role: str,
    *,
    wording: str | None,
    text: str | None,
    wordings_path: str | None,
) -> None:
    """One candidate's wordings approved: all of those in a --wordings file, or the one --wording names."""
    from evalpkg.testset.refresh import review_wording, review_wordings

    if wordings_path is not None:
        if len(ids) != 1:
            raise UsageError("--wordings: name exactly one candidate")
        texts = _wordings_file(wordings_path)
        source = f"--wordings {wordings_path}"
        for done in review_wordings(settings, ids[0], texts, reviewer, role, source=source):  # type: ignore[arg-type]
            to_stderr(f"{ids[0]} {done.key}: {'rewritten and ' if done.edited else ''}approved by {done.approved_by}")
    elif wording is not None:
        if len(ids) != 1:
            raise UsageError("--wording: name exactly one candidate")
        done = review_wording(settings, ids[0], wording, reviewer, role, text)  # type: ignore[arg-type]
        to_stderr(f"{ids[0]} {done.key}: {'rewritten and ' if done.edited else ''}approved by {done.approved_by}")


def _record_decisions(settings: Settings, ids: list[str], approve: bool, reviewer: str, role: str, note: str) -> None:
    from evalpkg.testset.refresh import review as record

    decision: Literal["approve", "reject"] = "approve" if approve else "reject"
    n = record(settings, ids, decision, reviewer, role, note)  # type: ignore[arg-type]
    to_stderr(f"recorded {decision} for {n} candidate(s)")


def _wordings_file(path: str) -> dict[str, str | None]:
    """The --wordings file; one that is not an object of texts is the option's error (exit 2), as a bad
    option value is."""
    import json
    from pathlib import Path

    from evalpkg.errors import ConfigError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--wordings {path}: cannot read it ({exc.strerror})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise UsageError(f"--wordings {path}: not JSON ({where})") from exc
    if not isinstance(data, dict) or not data:
        raise UsageError(f'--wordings {path}: expected an object of wordings, e.g. {{"zh/plain": "..."}}')
    if bad := [k for k, v in data.items() if not (v is None or isinstance(v, str))]:
        raise UsageError(f"--wordings {path}: field {bad[0]}: must be the text or null, got {data[bad[0]]!r}")
    return data


def _show_candidates(settings: Settings, ids: list[str]) -> None:
    from evalpkg.testset.models import Language
    from evalpkg.testset.refresh import load_queue
    from evalpkg.testset.ticket_task import period_anchor

    queue = {c.task.id: c for _, c in load_queue(settings)}
    if unknown := [i for i in ids if i not in queue]:
        raise UsageError(f"not in the review queue: {', '.join(unknown)}")
    for c in (queue[i] for i in ids):
        t = c.task
        status = f"released in {c.released_in}" if c.released_in else c.status
        typer.echo(f"{t.id} ({status}; ticket #{c.ticket_id}, {c.month}): {t.type.value}, {t.difficulty.value}")
        if c.request:
            typer.echo(f"  ticket request (source material): {c.request}")
        typer.echo(f"  gold: {t.gold_sql[0]}")
        typer.echo(f"  periods count from: {period_anchor(t.gold_sql[0], _asked_on(c))}")
        for o in t.outputs:
            typer.echo(f"  output {o.name} (column {o.column}): {o.meaning[Language.zh]} / {o.meaning[Language.en]}")
        typer.echo(f"  answer points: {len(t.answer_points)} number(s); tags: {', '.join(t.tags) or 'none'}")
        typer.echo(f"  second annotation: {_second_annotation(c)}")
        for v in t.variants:
            w = c.wording(f"{v.language.value}/{v.complexity.value}")
            state = f"approved by {w.approved_by}" if w and w.approved_by else "NOT APPROVED"
            origin = f"written by {w.approved_by}" if w and w.edited else f"drafted: {w.drafted_by if w else '?'}"
            typer.echo(f"  {v.language.value}/{v.complexity.value:<10} [{origin}; {state}] {v.text}")


def _asked_on(c: Candidate) -> datetime:
    """The ticket's own date: the candidate's provenance keeps it (its month's first day where it does not)."""
    from datetime import datetime

    created = c.task.provenance.params.get("created_at")
    return datetime.fromisoformat(str(created)) if created else datetime.fromisoformat(f"{c.month}-01")


def _second_annotation(c: Candidate) -> str:
    second = c.second_annotation
    if second is None:
        return "none yet"
    measured = f"{second.annotator.id}, agreement {second.agreement:.2f} ({second.detail})"
    return f"{measured}, VOID: {second.voided}; annotate it again" if second.voided else measured


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
    to_stderr(f"recorded {outcome} for {task_id}")


def adjudicate(
    source: Annotated[str, typer.Option("--from", help="the latest release, annotated and arbitrated")],
) -> None:
    """Next release = SOURCE with each task's review record (both annotators, measured agreement,
    arbitration) and the arbitrated golds applied."""
    from evalpkg.testset.adjudicate import adjudicate as run

    rel, plan = run(get_settings(), source, progress=to_stderr)
    to_stderr(f"released {rel.version}: {plan.summary()}")


def annotate(
    file: Annotated[str, typer.Option("--file", help="the second annotator's SQL (JSON, see testset/annotate.py)")],
    version: Annotated[str | None, typer.Option(help="the release to compare with; default: latest")] = None,
    findings: Annotated[bool, typer.Option(help="list every task the annotators disagree on")] = False,
    queue: Annotated[bool, typer.Option(help="measure the review queue's candidates instead (kept on each)")] = False,
    reference_worlds: Annotated[
        bool, typer.Option(help="measure in every reference world too (agreement only where it holds in all)")
    ] = True,
) -> None:
    """Measure a second annotator's agreement with the gold (comparator, per non-technical variant) on the
    snapshot and in every reference world, and keep both under tasks/annotations/ (with --queue: on each
    candidate of the review queue, recorded on the candidate)."""
    from pathlib import Path

    from evalpkg.testset import release, worlds
    from evalpkg.testset.annotate import load_annotation, measure_in_worlds, save

    settings = get_settings()
    annotation = load_annotation(Path(file))
    if queue:
        from evalpkg.testset.refresh import annotate_queue

        reference = worlds.WORLDS if reference_worlds else ()
        for c in annotate_queue(settings, annotation, reference=reference, progress=to_stderr):
            assert c.second_annotation is not None
            typer.echo(f"{c.task.id}: agreement {c.second_annotation.agreement:.2f}: {c.second_annotation.detail}")
        return
    rel = release.load(settings.tasks_dir, version)
    reference = worlds.WORLDS if reference_worlds else ()
    (measured,) = measure_in_worlds(settings, [(annotation, rel.tasks)], rel.version, reference, progress=to_stderr)
    save(settings.tasks_dir, annotation, measured)
    for t in measured.disagreements() if findings else []:
        typer.echo(f"{t.task_id}: agreement {t.agreement:.2f}: {t.detail}")
    n, bad = len(measured.annotated()), len(measured.disagreements())
    on_snapshot = sum(t.per_world[0] == 1.0 for t in measured.annotated())
    to_stderr(
        f"{annotation.annotator.id} on {measured.version}: {on_snapshot} of the {n} tasks it annotated agree on "
        f"every non-technical variant on the snapshot, {n - bad} ({measured.overall():.1%}) in all "
        f"{len(measured.worlds)} worlds ({len(measured.coincidences())} agree by coincidence of the snapshot); "
        f"{bad} to arbitrate (`evalpkg testset review --arbitrate TASK --outcome ...`)"
    )


def release_cmd(
    dry_run: Annotated[
        bool, typer.Option(help="say what would be released and refused, writing nothing; exits as the release would")
    ] = False,
    strict: Annotated[
        bool, typer.Option(help="exit 1 when any candidate is refused, even if a version is written")
    ] = False,
) -> None:
    """Make the next version from approved candidates, with CHANGELOG and manifest: those whose wordings
    are all approved and whose second annotation agrees, checked in every reference world as `validate
    --reference-worlds` checks a release; one that fails there is refused, saying where and why. Exits 0
    when a version is written (refusals listed), 1 when candidates were refused and none released."""
    from evalpkg.interrupts import Interrupted, held_interrupts
    from evalpkg.testset import release
    from evalpkg.testset.refresh import recover_release, release_queue

    settings = get_settings()
    tasks_dir = settings.tasks_dir
    recover_release(settings)  # release_queue does too; first here, so that the next version is known
    version = release.next_version(tasks_dir)
    if dry_run:  # the release without the writing: its held and refused lines (said once, by release_queue), its exit
        out = release_queue(settings, dry_run=True, progress=to_stderr)
        for tid in out.passed:
            typer.echo(f"would release {tid} in {version}")
        if out.passed:
            to_stderr(f"dry run: would release {version} with {len(out.passed)} new task(s); nothing written")
        else:
            to_stderr("nothing ready to release" if out.held or out.refused else "nothing approved to release")
        _exit_on_refusals(out, strict, released=bool(out.passed))
        return
    # Ctrl-C: before the release dir is renamed into place nothing is left behind; from then on it waits
    # until the CHANGELOG and the review queue say so too.
    done = f"{version} was released in full (tasks, manifest, CHANGELOG, review queue) before it took effect"
    try:
        with held_interrupts(lambda: (tasks_dir / version).exists(), done):
            out = release_queue(settings, progress=to_stderr)
    except KeyboardInterrupt as exc:
        raise Interrupted(str(exc) or f"nothing was released; {tasks_dir} is as it was") from None
    rel = out.release  # release_queue has said each held and refused candidate, with why
    if rel is not None:
        to_stderr(f"released {rel.version}: {len(rel.tasks)} tasks")
    else:
        to_stderr("nothing ready to release" if out.held or out.refused else "nothing approved to release")
    _exit_on_refusals(out, strict, released=rel is not None)


def _exit_on_refusals(out: QueueRelease, strict: bool, *, released: bool) -> None:
    """Exit 1 where candidates were refused and none released (with --strict: any refused); the dry run
    exits as its release would. Each refusal was said above with its reason, so it is counted, not repeated."""
    if out.refused and (strict or not released):
        raise DataError(
            f"refused {len(out.refused)} candidate(s) that fail the reference-world checks (each said above, with "
            f"why){'' if released else '; nothing released'}"
        )
