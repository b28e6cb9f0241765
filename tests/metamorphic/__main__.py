"""``python -m tests.metamorphic report [--write-known] [--only NAME ...]``: every input under
every transformation; prints, per transformation and per rule family, the invariance rate
(invariant / applicable pairs) and the failing (file, transformation) pairs — the work list of
the semantic core. ``--write-known`` rewrites ``known_failures.toml`` from this run."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

from tests.metamorphic import FAMILIES, REGISTRY
from tests.metamorphic.matrix import (
    RULE_FAMILIES,
    SILENT,
    Outcome,
    run_compositions,
    run_matrix,
    subjects,
    write_known,
)


def _rate(outcomes: list[Outcome]) -> str:
    applicable = [o for o in outcomes if o.applies]
    if not applicable:
        return "    -    (0 applicable)"
    good = sum(o.invariant for o in applicable)
    return f"{100 * good / len(applicable):5.1f} %  ({good}/{len(applicable)})"


def report(outcomes: list[Outcome], out=sys.stdout, quiet: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Print the invariance rates and the failing pairs of ``outcomes``."""
    by_name: dict[str, list[Outcome]] = defaultdict(list)
    by_family: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_name[o.chain[0]].append(o)
        if o.applies:
            for family in o.families:
                by_family[family].append(o)
    applicable = [o for o in outcomes if o.applies]
    print(
        f"inputs: {len({o.subject.key for o in outcomes})}, pairs applicable: {len(applicable)}, "
        f"invariant: {sum(o.invariant for o in applicable)} ({_rate(outcomes).strip()})",
        file=out,
    )
    print("\nper transformation (invariant / applicable):", file=out)
    for family in FAMILIES:
        for name in sorted(n for n in by_name if REGISTRY[n].family == family):
            print(f"  {name:24} {_rate(by_name[name])}", file=out)
        family_outcomes = [o for n, group in by_name.items() if REGISTRY[n].family == family for o in group]
        print(f"  {family + ' (all)':24} {_rate(family_outcomes)}", file=out)
    print(
        "\nper rule family of the original's codes (a pair counts in each; silent original: it reports"
        " nothing, so a change there is a gained, false finding):",
        file=out,
    )
    for family in [*RULE_FAMILIES.values(), "other", SILENT]:
        if by_family.get(family):
            print(f"  {family:24} {_rate(by_family[family])}", file=out)
    failing = sorted(
        (o for o in applicable if not o.invariant), key=lambda o: (o.changed_families[0], o.subject.key, o.chain)
    )
    print(f"\nfailing pairs ({len(failing)}), by the family of the codes lost or gained:", file=out)
    for o in [] if quiet else failing:
        print(f"  [{', '.join(o.changed_families)}] {o.subject.key}  {'+'.join(o.chain)}: {o.reason}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.metamorphic")
    parser.add_argument("command", choices=["report"])
    parser.add_argument("--write-known", action="store_true", help="rewrite known_failures.toml from this run")
    parser.add_argument("--only", nargs="*", default=None, help="transformations to run (default: all)")
    parser.add_argument("--quiet", action="store_true", help="rates only, no list of failing pairs")
    parser.add_argument("--engine", choices=["check", "traces"], default="check",
                        help="whose verdicts: the linter's check, or the trace properties of the simulator")
    args = parser.parse_args(argv)
    names = args.only or list(REGISTRY)
    started = time.perf_counter()
    if args.write_known and args.engine != "check":
        parser.error("--write-known records the check's failures")
    outcomes = run_matrix(subjects(), names, args.engine)
    report(outcomes, quiet=args.quiet)
    chains = [] if args.only or args.engine != "check" else run_compositions()
    if chains:
        failing = [o for o in chains if o.applies and not o.invariant]
        print(f"\ncompositions of 2-3 transformations (seeded): {_rate(chains).strip()}")
        for o in [] if args.quiet else failing:
            print(f"  [{', '.join(o.changed_families)}] {o.subject.key}  {'+'.join(o.chain)}: {o.reason}")
    print(f"\n({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    if args.write_known:
        print(f"wrote {write_known(outcomes + chains)} known failures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
