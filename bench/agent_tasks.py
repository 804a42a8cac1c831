"""Agent tasks replayed over a real corpus through MCP stdio: reply sizes, first-hit answers, calls.

    python bench/agent_tasks.py [--corpus DIR] [--code DIR]... [--tasks FILE] [--json OUT]
                                [--only ID,...] [--timeout S] [--work DIR] [--check]

The corpus the tasks were written for is the public MicrosoftDocs/PowerShell-Docs repository (its
Markdown: every PowerShell reference page in each version folder, 5.1, 7.4, 7.5, 7.6, 7.7, and the
conceptual docs). Clone it and give its root; the task paths are relative to it:

    git clone https://github.com/MicrosoftDocs/PowerShell-Docs /tmp/PowerShell-Docs
    git -C /tmp/PowerShell-Docs checkout 27138b21   # the commit the tasks were checked against
    python bench/agent_tasks.py --corpus /tmp/PowerShell-Docs --check

The server indexes only the .md/.txt/.rst files of the clone (3,117 at that commit). On another
commit a page may have moved or been reworded: ``--check`` reads bench/agent_tasks.json against the
corpus, without a server, and names each task whose file, heading or answer text is not there.

Each ``--code DIR`` is a checkout of this project (the working tree, a ``git worktree`` of an older
commit, ...); the default is the tree holding this script. Each gets its own server, started as
``DIR/main.py --source CORPUS --index-dir WORK/<name>/idx --scan-interval 0`` and driven by the
SDK's client over stdio; its first index is built before any task runs, one server at a time. The
index and the server's log go to WORK (a new folder under the temporary directory, /tmp; removed
at the end unless the run failed), never into a checkout. The tasks run in turn on every version,
the order of the versions rotating from task to task, so before/after come from one run of one
script.

Per task (bench/agent_tasks.json: the query an agent would type, the file that answers it and the
other versions' copies of it, the section heading, a short distinctive text of that section), a
fixed simple agent:

1. ``search(query, limit=10)``; the first hit whose path is the expected file or an accepted copy
   is taken; if the first page has none and the reply says more follow, ``search(..., offset=10)``;
   if that has none either, the task failed (2 calls).
2. ``get_document(path, heading=<that hit's heading>)`` (no heading when the hit has none); the
   task is answered when the answer text is in the returned text (spaces and line breaks
   normalised).

Calls = searches + get_documents. Reported per task and in total, per version of the code:

- reply characters of each search and of the get_document: the text content (what a client that
  shows text passes to the model) and the structured content as compact JSON;
- first hit file: the first result of the first search is the expected file or a copy;
- first hit answered: the first result of the first search is the expected file (or a copy) and
  lands on the answering section: its heading ends with the expected heading, or its lines overlap
  the section's own lines (the heading line to the next heading of any level, read from the file
  itself, outside code fences and front matter);
- calls, answered or the reason it failed, and each call's wall time (ms).

Reply fields are read with ``.get()``, so a server that leaves empty fields out is measured alike.
Not a test: ``tests/test_bench.py`` does not run it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from harness import load, powershell_docs, write_json

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TASKS = BENCH / "agent_tasks.json"
LIMIT = 10
PAGES = 2
CALL_TIMEOUT = 60.0
FENCE = re.compile(r"(`{3,}|~{3,})(.*)$")  # matched on the line without its indent (fences in list items)
ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")


# ---- the corpus side: sections as the file has them --------------------------------------------


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line number, level, text) of each ATX heading, outside front matter and code fences."""
    out = []
    start = 0
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        if end is not None:
            start = end + 1
    fence = None
    for i in range(start, len(lines)):
        line = lines[i]
        opened = FENCE.match(line.lstrip())
        if fence is None:
            if opened:
                fence = opened.group(1)
                continue
        else:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence) and not opened.group(2).strip():
                fence = None
            continue
        found = ATX.match(line)
        if found:
            out.append((i + 1, len(found.group(1)), found.group(2)))
    return out


def norm_heading(text: str) -> str:
    text = re.sub(r"[`*]", "", text).lower()
    text = re.sub(r"\s*>\s*", " > ", text)
    return " ".join(text.split())


def norm_text(text: str) -> str:
    return " ".join(text.split())


def section(path: Path, heading: str) -> dict | None:
    """The section named ``heading`` in a file: its own lines (up to the next heading of any
    level) and their text; None when the file or the heading is not there."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    marks = headings(lines)
    wanted = norm_heading(heading)
    matches = [n for n, (_, _, text) in enumerate(marks) if norm_heading(text) == wanted]
    if not matches:
        return None
    n = matches[0]
    first = marks[n][0]
    last = marks[n + 1][0] - 1 if n + 1 < len(marks) else len(lines)
    return {"line_start": first, "line_end": last, "text": "\n".join(lines[first - 1:last]), "occurrences": len(matches)}


def check_tasks(corpus: Path, tasks: list[dict]) -> list[str]:
    """What of each task the corpus does not hold (empty: all good)."""
    problems = []
    ids = [task["id"] for task in tasks]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"{dup}: id used twice")
    for task in tasks:
        for n, rel in enumerate([task["expected"], *task.get("copies", [])]):
            what = "expected" if n == 0 else "copy"
            found = section(corpus / rel, task["heading"])
            if found is None:
                problems.append(f"{task['id']}: {what} {rel}: " + ("no such file" if not (corpus / rel).is_file() else f"no heading {task['heading']!r}"))
            elif norm_text(task["answer"]) not in norm_text(found["text"]):
                problems.append(f"{task['id']}: {what} {rel}: answer text not in section {task['heading']!r} (lines {found['line_start']}-{found['line_end']})")
            elif found["occurrences"] > 1:
                problems.append(f"{task['id']}: {what} {rel}: heading {task['heading']!r} occurs {found['occurrences']} times (the first is used)")
    return problems


# ---- the server side -----------------------------------------------------------------------------


def reply_of(result) -> tuple[dict, int, int]:
    """(reply as a dict, characters of the text content, characters of the structured content as compact JSON)."""
    text = "".join(getattr(item, "text", None) or "" for item in (result.content or []))
    structured = result.structured_content
    reply = structured
    if reply is None:
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
    if not isinstance(reply, dict):
        reply = {}
    struct_chars = len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False)) if structured is not None else 0
    return reply, len(text), struct_chars


async def call(client, name: str, args: dict) -> dict:
    started = time.perf_counter()
    with anyio.fail_after(CALL_TIMEOUT):
        result = await client.call_tool(name, args)
    ms = (time.perf_counter() - started) * 1000
    reply, text_chars, struct_chars = reply_of(result)
    out = {"tool": name, "args": args, "ms": round(ms, 1), "text_chars": text_chars, "struct_chars": struct_chars,
           "reply": reply, "error": None}
    if result.is_error:
        out["error"] = ("".join(getattr(item, "text", None) or "" for item in (result.content or [])) or "error")[:300]
    return out


def more_follow(reply: dict, results: list) -> bool:
    if "has_more" in reply and reply["has_more"] is not None:
        return bool(reply["has_more"])
    if "next_offset" in reply:
        return reply["next_offset"] is not None
    return len(results) >= LIMIT


def lands(hit: dict, task: dict, corpus: Path, accepted: set[str]) -> tuple[bool, str]:
    """Whether a hit is the expected file (or a copy) and on the answering section, and why not."""
    path = hit.get("path")
    if path not in accepted:
        return False, "other file"
    got = norm_heading(hit.get("heading") or "")
    want = norm_heading(task["heading"])
    if got == want or got.endswith(" > " + want):
        return True, "heading"
    span = section(corpus / path, task["heading"])
    start, end = hit.get("line_start"), hit.get("line_end")
    if span and isinstance(start, int):
        end = end if isinstance(end, int) else start
        if start <= span["line_end"] and end >= span["line_start"]:
            return True, "lines"
    return False, "other section"


async def run_task(client, task: dict, corpus: Path) -> dict:
    accepted = {task["expected"], *task.get("copies", [])}
    calls = []
    out: dict = {"id": task["id"], "kind": task["kind"], "first_hit_answered": False, "first_hit_file": False, "first_hit": None,
                 "found_rank": None, "read": None, "answered": False, "failure": None}
    taken = None
    for page in range(PAGES):
        args = {"query": task["query"], "limit": LIMIT}
        if page:
            args["offset"] = page * LIMIT
        done = await call(client, "search", args)
        calls.append(done)
        if done["error"]:
            out["failure"] = f"search error: {done['error']}"
            break
        results = done["reply"].get("results") or []
        if page == 0:
            out["distinct_snippets"] = len({hit.get("snippet") for hit in results})
            out["repeated_pages"] = repeated_pages(results)
            if results:
                first = results[0]
                ok, why = lands(first, task, corpus, accepted)
                out["first_hit_answered"] = ok
                out["first_hit_file"] = first.get("path") in accepted
                out["first_hit"] = {"path": first.get("path"), "heading": first.get("heading"),
                                    "lines": [first.get("line_start"), first.get("line_end")], "verdict": why}
        for rank, hit in enumerate(results):
            if hit.get("path") in accepted:
                taken = hit
                out["found_rank"] = page * LIMIT + rank + 1
                break
        if taken or not more_follow(done["reply"], results):
            break
    if taken:
        args = {"path": taken["path"]}
        if taken.get("heading"):
            args["heading"] = taken["heading"]
        done = await call(client, "get_document", args)
        calls.append(done)
        out["read"] = {"path": taken["path"], "heading": taken.get("heading")}
        if done["error"]:
            out["failure"] = f"get_document error: {done['error']}"
        elif norm_text(task["answer"]) in norm_text(done["reply"].get("text") or ""):
            out["answered"] = True
        else:
            out["failure"] = "answer not in the section read" + (" (truncated)" if done["reply"].get("truncated") else "")
    elif out["failure"] is None:
        out["failure"] = f"file not in the first {len(calls)} page(s) of results"
    searches = [c for c in calls if c["tool"] == "search"]
    docs = [c for c in calls if c["tool"] == "get_document"]
    out["calls"] = len(calls)
    out["searches"] = len(searches)
    out["search_text_chars"] = [c["text_chars"] for c in searches]
    out["search_struct_chars"] = [c["struct_chars"] for c in searches]
    out["doc_text_chars"] = docs[0]["text_chars"] if docs else None
    out["doc_struct_chars"] = docs[0]["struct_chars"] if docs else None
    out["ms"] = [c["ms"] for c in calls]
    out["search_ms"] = [c["ms"] for c in searches]
    out["doc_ms"] = docs[0]["ms"] if docs else None
    return out


async def wait_idle(client, deadline: float) -> dict:
    while True:
        done = await call(client, "get_index_status", {})
        status = done["reply"]
        if done["error"] or status.get("state") == "error":
            raise RuntimeError(f"index status: {done['error'] or status.get('last_error')}")
        if status.get("state") == "idle" and status.get("last_scan"):
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"index not ready: {status.get('state')} {status.get('progress')}")
        await anyio.sleep(0.2)


def revision(code: Path) -> str | None:
    """The checkout's commit, with "+changes" when its tracked files differ from it (read-only git calls)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        head = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, env=env)
        if head.returncode:
            return None
        diff = subprocess.run(["git", "-C", str(code), "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if diff.returncode == 1 else "")


async def replay(corpus: Path, codes: dict[str, Path], tasks: list[dict], work: Path, deadline: float) -> dict:
    from contextlib import AsyncExitStack

    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    clients = {}
    info = {}
    async with AsyncExitStack() as stack:
        for name, code in codes.items():  # one at a time: each first index has the cores to itself
            home = work / name
            home.mkdir(parents=True, exist_ok=True)
            log = stack.enter_context(open(home / "server.log", "a"))
            params = StdioServerParameters(
                command=sys.executable,
                args=[str(code / "main.py"), "--source", str(corpus), "--index-dir", str(home / "idx"), "--scan-interval", "0"],
                cwd=str(home),
            )
            started = time.perf_counter()
            client = await stack.enter_async_context(Client(stdio_client(params, errlog=log)))
            status = await wait_idle(client, deadline)
            info[name] = {"dir": str(code), "revision": revision(code), "first_index_s": round(time.perf_counter() - started, 1),
                          "indexed_files": status.get("indexed_files"), "total_documents": status.get("total_documents")}
            await call(client, "search", {"query": "PowerShell", "limit": LIMIT})  # warm-up, not counted
            clients[name] = client
        names = list(codes)
        results: dict[str, list[dict]] = {name: [] for name in names}
        for n, task in enumerate(tasks):
            turn = n % len(names)
            for name in names[turn:] + names[:turn]:  # no version always goes first
                if time.monotonic() > deadline:
                    raise TimeoutError(f"--timeout reached at task {task['id']}")
                results[name].append(await run_task(clients[name], task, corpus))
    return {"codes": info, "results": results}


# ---- figures ---------------------------------------------------------------------------------


def mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 1) if values else None


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def repeated_pages(results: list[dict]) -> int:
    """Hits of a page that repeat a page already shown above them: the same file name in another
    folder (a version folder's copy), or a path already named in an earlier hit's also_in."""
    seen: set[str] = set()
    repeats = 0
    for hit in results:
        path = hit.get("path") or ""
        name = path.rsplit("/", 1)[-1]
        if name in seen or path in seen:
            repeats += 1
        seen.add(name)
    return repeats


def totals(rows: list[dict]) -> dict:
    kinds = sorted({row["kind"] for row in rows})
    first_text = [row["search_text_chars"][0] for row in rows if row["search_text_chars"]]
    first_struct = [row["search_struct_chars"][0] for row in rows if row["search_struct_chars"]]
    all_text = [c for row in rows for c in row["search_text_chars"]]
    all_struct = [c for row in rows for c in row["search_struct_chars"]]
    return {
        "tasks": len(rows),
        "first_hit_file": sum(row["first_hit_file"] for row in rows),
        "first_hit_answered": sum(row["first_hit_answered"] for row in rows),
        "mean_distinct_snippets_top10": mean([row.get("distinct_snippets") for row in rows if row.get("distinct_snippets") is not None]),
        "mean_repeated_pages_top10": mean([row.get("repeated_pages") for row in rows if row.get("repeated_pages") is not None]),
        "answered": sum(row["answered"] for row in rows),
        "failed": sum(not row["answered"] for row in rows),
        "mean_calls": round(statistics.fmean(row["calls"] for row in rows), 2) if rows else None,
        "total_calls": sum(row["calls"] for row in rows),
        "mean_first_search_text_chars": mean(first_text),
        "mean_first_search_struct_chars": mean(first_struct),
        "mean_search_text_chars": mean(all_text),
        "mean_search_struct_chars": mean(all_struct),
        "mean_doc_text_chars": mean([row["doc_text_chars"] for row in rows]),
        "mean_doc_struct_chars": mean([row["doc_struct_chars"] for row in rows]),
        "total_text_chars": sum(all_text) + sum(row["doc_text_chars"] or 0 for row in rows),
        "total_struct_chars": sum(all_struct) + sum(row["doc_struct_chars"] or 0 for row in rows),
        "median_search_ms": median([ms for row in rows for ms in row["search_ms"]]),
        "median_doc_ms": median([row["doc_ms"] for row in rows]),
        "by_kind": {
            kind: {
                "tasks": sum(row["kind"] == kind for row in rows),
                "first_hit_file": sum(row["first_hit_file"] for row in rows if row["kind"] == kind),
                "first_hit_answered": sum(row["first_hit_answered"] for row in rows if row["kind"] == kind),
                "answered": sum(row["answered"] for row in rows if row["kind"] == kind),
                "failed": [row["id"] for row in rows if row["kind"] == kind and not row["answered"]],
            }
            for kind in kinds
        },
    }


def report(run: dict, tasks: list[dict]) -> None:
    names = list(run["codes"])
    for name in names:
        code = run["codes"][name]
        print(f"\n== {name}: {code['dir']} ({code['revision'] or 'no git revision'}); first index {code['first_index_s']} s, "
              f"{code['indexed_files']} files")
        print(f"{'task':<26}{'kind':<10}{'1st':>4}{'rank':>5}{'calls':>6}{'search txt':>11}{'search js':>10}{'doc txt':>9}{'doc js':>9}  result")
        for row in run["results"][name]:
            first = "yes" if row["first_hit_answered"] else "no"
            rank = str(row["found_rank"] or "-")
            search_txt = "+".join(str(c) for c in row["search_text_chars"])
            search_js = "+".join(str(c) for c in row["search_struct_chars"])
            doc_txt = str(row["doc_text_chars"] if row["doc_text_chars"] is not None else "-")
            doc_js = str(row["doc_struct_chars"] if row["doc_struct_chars"] is not None else "-")
            result = "answered" if row["answered"] else row["failure"]
            print(f"{row['id']:<26}{row['kind']:<10}{first:>4}{rank:>5}{row['calls']:>6}{search_txt:>11}{search_js:>10}{doc_txt:>9}{doc_js:>9}  {result}")
            if not row["first_hit_answered"] and row["first_hit"]:
                hit = row["first_hit"]
                print(f"{'':<26}  first hit ({hit['verdict']}): {hit['path']} | {hit['heading']} {hit['lines']}")
            if not row["answered"] and row["read"]:
                print(f"{'':<26}  read: {row['read']['path']} | {row['read']['heading']}")
    sums = {name: run["totals"][name] for name in names}
    print(f"\n{'totals':<36}" + "".join(f"{name:>16}" for name in names))
    for key in ("tasks", "first_hit_file", "first_hit_answered", "mean_distinct_snippets_top10", "mean_repeated_pages_top10",
                "answered", "failed", "mean_calls", "total_calls",
                "mean_first_search_text_chars", "mean_first_search_struct_chars", "mean_search_text_chars",
                "mean_search_struct_chars", "mean_doc_text_chars", "mean_doc_struct_chars", "total_text_chars",
                "total_struct_chars", "median_search_ms", "median_doc_ms"):
        print(f"{key:<36}" + "".join(f"{str(sums[name][key]):>16}" for name in names))
    print("\nby kind (first hit answered / answered / tasks; failed tasks)")
    for kind in sorted({task["kind"] for task in tasks}):
        for name in names:
            k = sums[name]["by_kind"].get(kind)
            if k:
                print(f"  {kind:<10} {name:<12} {k['first_hit_answered']}/{k['answered']}/{k['tasks']}  {', '.join(k['failed']) or '-'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, help="root of a PowerShell-Docs clone (default: bench/harness.py's powershell-docs corpus)")
    parser.add_argument("--code", type=Path, action="append", help="a checkout of this project to measure (repeatable; default: this tree)")
    parser.add_argument("--tasks", type=Path, default=TASKS)
    parser.add_argument("--only", help="comma-separated task ids")
    parser.add_argument("--json", type=Path, help="write the per-task results and totals here")
    parser.add_argument("--work", type=Path, help="folder for the indexes and server logs (default: a new one under the temporary directory)")
    parser.add_argument("--timeout", type=float, default=900, help="give up after this many seconds in all (default 900)")
    parser.add_argument("--check", action="store_true", help="only check the tasks against the corpus; no server")
    args = parser.parse_args()

    corpus = (args.corpus or powershell_docs()).resolve()
    spec = json.loads(args.tasks.read_text(encoding="utf-8"))
    tasks = spec["tasks"]
    if args.only:
        wanted = set(args.only.split(","))
        tasks = [task for task in tasks if task["id"] in wanted]
    problems = check_tasks(corpus, tasks)
    for problem in problems:
        print(f"task problem: {problem}", file=sys.stderr)
    if args.check:
        print(f"{len(tasks)} tasks, {len(problems)} problems")
        return 1 if problems else 0

    codes: dict[str, Path] = {}
    for n, code in enumerate(args.code or [REPO]):
        code = code.resolve()
        if not (code / "main.py").is_file():
            parser.error(f"--code {code}: no main.py there")
        name = code.name if code.name not in codes else f"{code.name}-{n}"
        codes[name] = code
    for code in codes.values():
        if corpus == code or code in corpus.parents:
            parser.error("--corpus inside a --code checkout: the index and corpus stay out of the repo")
    work = args.work or Path(tempfile.mkdtemp(prefix="agent_tasks-"))
    for code in codes.values():
        if work.resolve() == code or code in work.resolve().parents:
            parser.error("--work inside a --code checkout: the index goes to /tmp, never into the repo")
    deadline = time.monotonic() + args.timeout

    async def bounded() -> dict:
        with anyio.fail_after(args.timeout):
            return await replay(corpus, codes, tasks, work, deadline)

    load_start = load()
    try:
        run = anyio.run(bounded)
    except BaseException:
        print(f"run failed; indexes and server logs kept in {work}", file=sys.stderr)
        raise
    run["totals"] = {name: totals(rows) for name, rows in run["results"].items()}
    run["corpus"] = str(corpus)
    run["tasks_file"] = str(args.tasks)
    run["load"] = [load_start, load()]
    report(run, tasks)
    write_json(args.json, run)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
