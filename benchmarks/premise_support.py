"""How many events decide each stated premise? For every task of a release whose premise is a change of a
count (visits, admissions), in every reference world: the two periods' counts and the change in standard
errors of chance (|after - before| / sqrt(before + after), two Poisson counts). A premise decided by a handful
of visits reads noise: models.Premise.counts_events makes validate and reselect hold such a change to
premises.CHANCE_SIGMAS of them. Also per template: the events its earlier period needs for the smallest fall
the premise states to lie beyond chance, against what a reference world gives. Builds the reference worlds
where needed (`testset worlds`). With --patients N, the reference worlds' seeds and keys at another size (each
world scaled by N / 2,000, `worlds.scaled`: the size the next worlds are chosen at), built where needed beside them.

    .venv/bin/python benchmarks/premise_support.py [--version v9] [--patients 50000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.errors import QueryError
from evalpkg.settings import get_settings
from evalpkg.sql.gold import gold_runner
from evalpkg.testset import premises, release, worlds
from evalpkg.testset.build import load_templates


def needed(fall: float) -> float:
    """Events in the earlier period for a fall of `fall` (0.2: 20%) to reach CHANCE_SIGMAS:
    r*a >= k*sqrt(a + (1-r)*a)  <=>  a >= k^2 (2 - r) / r^2."""
    return premises.CHANCE_SIGMAS**2 * (2 - fall) / fall**2 if fall else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="the release (default: the latest)")
    parser.add_argument("--patients", type=int, help="the README world's size in the worlds read (default: as built)")
    args = parser.parse_args()
    settings = get_settings()
    reference = worlds.scaled(args.patients) if args.patients else worlds.WORLDS
    rel = release.load(settings.tasks_dir, args.version)
    # the templates' premises as they stand now (a release cut before counts_events existed has none)
    stated = {t.id: t.premise for t in load_templates().templates if t.premise is not None}
    counted = {t.id: p for t in rel.tasks if (p := stated.get(t.provenance.template_id or "")) and p.counts_events}
    tasks = [t for t in rel.tasks if t.id in counted]
    print(f"{rel.version}: {len(tasks)} tasks state a change of a count")
    # template -> [(before, after, sigmas)] over tasks x worlds
    seen: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for world, kept in worlds.each(settings, reference, progress=print):
        with gold_runner(kept) as golds:
            for task in tasks:
                premise = counted[task.id]
                try:
                    result = golds.result(task.gold_sql[0])
                except QueryError:
                    continue
                got = premises.periods(premise.measure, premise.rows, result.columns, result.rows)
                if got is None or got[0] is None or got[1] is None:
                    continue
                before, after = got[0], got[1]
                seen[task.provenance.template_id or task.id].append((before, after, premises.sigmas(before, after)))
        print(f"  read {world.label()}")
    print(f"\n{'template':48} {'n':>3} {'events (median, min)':>22} {'sigmas (median, min)':>22} {'<2':>4}")
    for template, rows in sorted(seen.items()):
        events = [b + a for b, a, _ in rows]
        sig = [s for _, _, s in rows]
        print(
            f"{template:48} {len(rows):3} {statistics.median(events):14.0f} {min(events):7.0f}"
            f" {statistics.median(sig):14.1f} {min(sig):7.1f} {sum(s < premises.CHANCE_SIGMAS for s in sig):4}"
        )
    print(f"\n{'template':48} {'tasks':>5} {'needs in the earlier period':>28}")
    for template_id, premise in sorted(stated.items()):
        if premise.counts_events:
            held = sum(t.provenance.template_id == template_id for t in tasks)
            print(f"{template_id:48} {held:5} {needed(premise.min_relative):28.0f}")
    everything = [s for rows in seen.values() for _, _, s in rows]
    if everything:
        weak = sum(s < premises.CHANCE_SIGMAS for s in everything)
        print(f"\nbelow {premises.CHANCE_SIGMAS:g} sigmas: {weak} of {len(everything)} task x world readings")
        print(f"weakest: {min(everything):.2f} sigmas; median {statistics.median(everything):.1f}")


if __name__ == "__main__":
    main()
