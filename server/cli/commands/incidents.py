"""``straggler-lens incidents``: search, list, show, similar cases and the vocabulary.

``search``, ``list`` and ``similar`` print a table, or with ``--json`` the public contract
``{"total", "results": [{"id", "title", "score", "category", "causes", "tags", "reasons"}],
"next_offset"}``. ``show`` prints one case (``--json``: the full case). ``vocab`` prints the
categories, cause ids, tags and topics with their counts. Unknown ids and bad filters exit with
status 2 and one line on stderr; an empty result says so on stderr and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--category", help="broad incident category (see `incidents vocab`)")
    p.add_argument("--cause", help="cause id, e.g. gc-pause, stage-imbalance")
    p.add_argument("--tag", help="tag, e.g. python-gc")
    p.add_argument("--topic", help="topic name, e.g. stragglers")
    p.add_argument("--org", help="organisation (case-insensitive substring), e.g. Meta")
    p.add_argument("--since", type=int, metavar="YEAR", help="cases from this year on")
    p.add_argument("--until", type=int, metavar="YEAR", help="cases up to this year")
    p.add_argument("--limit", type=int, default=None, help="results per page (1-100)")
    p.add_argument("--offset", type=int, default=0, help="skip this many results")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "incidents",
        help="search the library of real straggler and training incidents",
        description="Search, browse and compare real, sourced incidents of slow or failing LLM training.",
    )
    sub = p.add_subparsers(dest="incidents_command", metavar="ACTION")
    p.set_defaults(func=lambda _args: _usage(p))

    s = sub.add_parser("search", help="ranked, typo-tolerant search", description="Rank cases for a query.")
    s.add_argument("query", help="free text, e.g. 'garbage collection pauses'")
    _add_filters(s)
    s.set_defaults(func=handle_search)

    ls = sub.add_parser("list", help="list cases (newest first) with filters")
    _add_filters(ls)
    ls.set_defaults(func=handle_list)

    sh = sub.add_parser("show", help="print one case")
    sh.add_argument("id", help="case id, e.g. IL-0417")
    sh.add_argument("--json", action="store_true", help="print the full case as JSON")
    sh.set_defaults(func=handle_show)

    si = sub.add_parser("similar", help="cases most similar to a case")
    si.add_argument("id", help="case id, e.g. IL-0417")
    si.add_argument("--limit", type=int, default=5, help="number of cases (1-100)")
    si.add_argument("--json", action="store_true", help="print the result as JSON")
    si.set_defaults(func=handle_similar)

    v = sub.add_parser("vocab", help="categories, cause ids, tags and topics with counts")
    v.add_argument("--json", action="store_true", help="print the vocabulary as JSON")
    v.set_defaults(func=handle_vocab)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "category": args.category,
        "cause": args.cause,
        "tag": args.tag,
        "topic": args.topic,
        "org": args.org,
        "year_from": args.since,
        "year_to": args.until,
    }


def _print_results(result: Any, as_json: bool, *, scored: bool = True) -> int:
    if as_json:
        print(json.dumps(result.contract(), ensure_ascii=False, indent=2))
    else:
        for hit in result.results:
            score = f"{hit.score:5.1f}  " if scored and hit.score is not None else ""
            causes = ",".join(hit.causes) or "-"
            print(f"{hit.id}  {score}{hit.date:<10}  {hit.title}")
            print(f"        {hit.category} | causes: {causes} | {hit.organization}")
            if hit.reasons:
                print(f"        why: {'; '.join(hit.reasons[:4])}")
        if result.results:
            more = f"; next page: --offset {result.next_offset}" if result.next_offset is not None else ""
            print(f"\n{len(result.results)} of {result.total} shown{more}")
    if result.message:
        print(result.message, file=sys.stderr)
    return 0


def handle_search(args: argparse.Namespace) -> int:
    from incidents import search_incidents

    limit = 10 if args.limit is None else args.limit
    result = search_incidents(args.query, **_filters(args), limit=limit, offset=args.offset)
    return _print_results(result, args.json)


def handle_list(args: argparse.Namespace) -> int:
    from incidents import list_incidents

    limit = 20 if args.limit is None else args.limit
    result = list_incidents(_filters(args), limit=limit, offset=args.offset)
    return _print_results(result, args.json, scored=False)


def handle_similar(args: argparse.Namespace) -> int:
    from incidents import similar_incidents

    result = similar_incidents(case_id=args.id, limit=args.limit)
    return _print_results(result, args.json)


def handle_show(args: argparse.Namespace) -> int:
    from incidents import get_incident

    case = get_incident(args.id)
    if args.json:
        print(json.dumps(case.model_dump(mode="json"), ensure_ascii=False, indent=2))
        return 0
    print(render_case(case))
    return 0


def handle_vocab(args: argparse.Namespace) -> int:
    from incidents import vocab

    v = vocab()
    if args.json:
        print(json.dumps(v.model_dump(mode="json"), ensure_ascii=False, indent=2))
        return 0
    print(f"{v.total_cases} cases\n\ncategories (-> cause ids):")
    for e in v.categories:
        print(f"  {e.name:<30} {e.count:>3}  -> {', '.join(e.causes or []) or '(none)'}")
    print("\ncause ids:")
    for e in v.causes:
        print(f"  {e.name:<30} {e.count:>3}")
    print("\ntopics:")
    for e in v.topics:
        print(f"  {e.name:<30} {e.count:>3}  {e.description}")
    print("\ntags (most used first):")
    print(
        textwrap.fill(
            ", ".join(f"{e.name} ({e.count})" for e in v.tags),
            width=100,
            initial_indent="  ",
            subsequent_indent="  ",
        )
    )
    return 0


def render_case(case: Any) -> str:
    """A case as readable text, in the section order of the case file."""
    out: list[str] = []
    wrap = textwrap.TextWrapper(width=100, subsequent_indent="    ")
    date = case.date + (" (unverified)" if case.date_unverified else "")
    out.append(f"{case.id} · {case.organization} · {date} ({case.date_kind}) · {case.domain}")
    out.append(case.title)
    out.extend(f"  also: {a}" for a in case.aliases)
    out.append("")
    out.append(textwrap.fill(case.summary, width=100))
    imp = case.impact
    box = [
        ("scope", imp.scope),
        ("affected users", imp.affected_users),
        ("severity", imp.severity),
        ("region", imp.region),
        ("time to detect", imp.time_to_detect),
        ("time to recover", imp.time_to_recover),
    ]
    out.append("")
    out.extend(f"{k:>16}: {v if v is not None else '–'}" for k, v in box)
    out.append(f"{'category':>16}: {case.category}")
    out.append(f"{'causes':>16}: {', '.join(c.value for c in case.causes) or '–'}")

    def section(name: str, items: list[str]) -> None:
        if items:
            out.append(f"\n{name}:")
            out.extend(wrap.fill(f"  - {x}") for x in items)

    section("symptoms", case.symptoms)
    section("causes", case.cause_notes + ([f"trigger: {case.trigger}"] if case.trigger else []))
    section("detection", case.detection)
    section("mitigations", [m.action + (f" -> {m.effect}" if m.effect else "") for m in case.mitigations])
    section("follow-ups", case.follow_ups)
    section("lessons", case.lessons)
    section("sources", [f"{s.url} ({s.type})" for s in case.sources])
    section(
        "signature",
        [
            f"{s.cause.value}: "
            + "/".join(
                str(p.value)
                for p in (s.pattern.spatial, s.pattern.temporal, s.pattern.resource)
                if p is not None
            )
            for s in case.signature
        ],
    )
    if case.related:
        out.append(f"\nrelated: {', '.join(case.related)}")
    out.append(f"tags: {', '.join(case.tags)}")
    out.append(f"topics: {', '.join(case.topics)}")
    return "\n".join(out)
