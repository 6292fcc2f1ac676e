"""The Python side of `tests/python_roundtrip.rs`: values generated with hypothesis (seeded and
bounded), submitted with the reference's own client, and checked after Rust processes touched
them.

Usage: ``roundtrip.py session``: one request per line on stdin (``{"command": …, "args":
{…}}``), one JSON answer line each (``{"ok": true, …}`` or ``{"ok": false, "error": …,
"message": …}``; tracebacks go to stderr).

Every command takes ``backend`` ("postgres" or "mysql"), ``dsn`` (an SQLAlchemy async URL),
``table``, ``attempts_table`` and ``namespace``.

Commands:
  create-tables     -> the reference creates the tables
  submit-generated  task, count, seed -> submits ``count`` generated (payload, metadata) pairs,
                    each with the idempotency key ``p-<index>``; {"ids": [...], "tags": {tag:
                    count}, "skipped": n}
  check-echoed      ids -> for each id, the result the reference reads must be the payload it
                    reads, compared strictly (types, order, float bits, enum members);
                    {"checked": n, "mismatches": [...]}
  resubmit-read     ids -> submits again what the reference reads of each, under its key
                    ``p-<index>``; {"outcomes": ["same" | "conflict" | "other <id>", ...]}
  http-json         task, count, seed, url -> submits generated JSON documents both through the
                    reference's client and as the raw text to the HTTP API at ``url`` with one
                    idempotency key each (alternating who goes first), and a different
                    document under a used key on the other side; {"checked": n, "conflicts": n,
                    "mismatches": [...]}
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import decimal
import enum
import json
import sys
import traceback
import urllib.error
import urllib.request
import uuid
from typing import Any

import atexit
import shutil
import tempfile

import hypothesis.configuration
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

# Hypothesis caches Unicode tables in `.hypothesis/` under the working directory; keep them in a
# directory of our own that goes away with the process.
_HOME = tempfile.mkdtemp(prefix="onestep-hypothesis-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
hypothesis.configuration.set_hypothesis_home_dir(_HOME)

from onestep import ExecutionClient
from onestep.capture.codec import TAG, encode_value
from onestep.execution import ExecutionConflict, ExecutionEncodingError


class Colour(enum.Enum):
    RED = 1
    GREEN = "green"
    PAIR = (1, "two")


class Level(enum.IntEnum):
    LOW = 1
    HUGE = 10**30


Point = collections.namedtuple("Point", ["x", "y"])
Pair = collections.namedtuple("Pair", "left right")


def make_backend(args: dict[str, Any], auto_create: bool = False) -> Any:
    options = {
        "dsn": args["dsn"],
        "table": args["table"],
        "attempts_table": args["attempts_table"],
        "auto_create": auto_create,
    }
    if args["backend"] == "postgres":
        from onestep_sql.postgres import PostgresExecutionBackend

        return PostgresExecutionBackend(**options)
    if args["backend"] == "mysql":
        from onestep_sql.mysql import MySQLExecutionBackend

        return MySQLExecutionBackend(**options)
    raise ValueError(f"unknown backend {args['backend']!r}")


def client(args: dict[str, Any]) -> ExecutionClient:
    return ExecutionClient(make_backend(args), namespace=args["namespace"])


# ---------------------------------------------------------------------------------------------
# Python values of every tag
# ---------------------------------------------------------------------------------------------

TEXT = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12
)
KEYS = st.one_of(st.sampled_from([TAG, "type", "values", "items", "a", "Z", "é"]), TEXT)
INTS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(10**60), max_value=10**60),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1]),
)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
OFFSETS = st.one_of(
    st.just(dt.timezone.utc),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
        lambda m: dt.timezone(dt.timedelta(minutes=m))
    ),
    st.integers(min_value=-86399, max_value=86399).map(
        lambda s: dt.timezone(dt.timedelta(seconds=s))
    ),
)
DATETIMES = st.builds(
    lambda naive, tz, fold: naive.replace(tzinfo=tz, fold=fold),
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.one_of(st.none(), OFFSETS),
    st.sampled_from([0, 1]),
)
DECIMALS = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False),
    st.sampled_from([decimal.Decimal(t) for t in ["NaN", "-Infinity", "1E+3", "-0.00", "1e-30"]]),
)
ENUMS = st.sampled_from(list(Colour) + list(Level))

HASHABLE_LEAVES = st.one_of(
    st.none(), st.booleans(), INTS, FLOATS, TEXT, st.uuids(), st.binary(max_size=8),
    DATETIMES, st.decimals(allow_nan=False, allow_infinity=False), ENUMS,
)
HASHABLE = st.recursive(
    HASHABLE_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple),
        st.frozensets(inner, max_size=3),
        st.builds(Point, inner, inner),
    ),
    max_leaves=6,
)
LEAVES = st.one_of(
    st.none(), st.booleans(), INTS, FLOATS, TEXT, st.uuids(), st.binary(max_size=16),
    DATETIMES, DECIMALS, ENUMS,
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.sets(HASHABLE, max_size=4),
        st.frozensets(HASHABLE, max_size=4),
        st.dictionaries(KEYS, inner, max_size=4),
        st.builds(Point, inner, inner),
        st.builds(Pair, inner, inner),
    )


VALUES = st.recursive(LEAVES, containers, max_leaves=14)
METADATA = st.dictionaries(
    KEYS.filter(lambda k: k != "onestep.execution"), VALUES, max_size=3
)


def examples(strategy: st.SearchStrategy[Any], count: int, seed_value: int) -> list[Any]:
    """`count` examples of `strategy`, the same ones for the same seed."""
    found: list[Any] = []

    @seed(seed_value)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        found.append(value)

    collect()
    return found[:count]


def tags_in(encoded: Any, counts: collections.Counter[str]) -> None:
    if isinstance(encoded, list):
        for item in encoded:
            tags_in(item, counts)
    elif isinstance(encoded, dict):
        payload = encoded.get(TAG)
        if len(encoded) == 1 and isinstance(payload, dict):
            counts[payload["type"]] += 1
        for item in encoded.values():
            tags_in(item, counts)
    elif isinstance(encoded, int) and not isinstance(encoded, bool) and abs(encoded) >= 2**64:
        counts["int beyond 64 bits"] += 1


# ---------------------------------------------------------------------------------------------
# Strict comparison
# ---------------------------------------------------------------------------------------------


def canonical(value: Any) -> str:
    return json.dumps(encode_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down: a tuple is not a list, a set not a
    frozenset, 1 not 1.0 nor True, -0.0 not 0.0; dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    if isinstance(a, dt.datetime):
        return a.isoformat() == b.isoformat() and a.fold == b.fold
    if isinstance(a, enum.Enum):
        return a is b
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return canonical(a) == canonical(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


async def cmd_create_tables(args: dict[str, Any]) -> dict[str, Any]:
    backend = make_backend(args, auto_create=True)
    await backend.open()
    await backend.close()
    return {}


async def cmd_submit_generated(args: dict[str, Any]) -> dict[str, Any]:
    payloads = examples(VALUES, args["count"], args["seed"])
    metadatas = examples(METADATA, args["count"], args["seed"] + 1)
    ids: list[str] = []
    tags: collections.Counter[str] = collections.Counter()
    skipped: list[str] = []
    async with client(args) as c:
        for index, (payload, metadata) in enumerate(zip(payloads, metadatas)):
            try:
                execution = await c.submit(
                    args["task"], payload, metadata=metadata, idempotency_key=f"p-{index}"
                )
            except (ValueError, ExecutionEncodingError) as exc:  # too deep for MariaDB, say
                skipped.append(f"{type(exc).__name__}: {exc}")
                continue
            ids.append(str(execution.id))
            tags_in(encode_value(payload), tags)
            tags_in(encode_value(metadata), tags)
    return {"ids": ids, "tags": dict(tags), "skipped": skipped}


async def cmd_check_echoed(args: dict[str, Any]) -> dict[str, Any]:
    mismatches: list[dict[str, Any]] = []
    async with client(args) as c:
        for execution_id in args["ids"]:
            execution = await c.get(execution_id)
            if execution is None or execution.status.value != "succeeded":
                mismatches.append({"id": execution_id, "status": getattr(execution, "status", None) and execution.status.value})
                continue
            try:
                result = await c.result(execution_id)
            except Exception as exc:  # a result the reference cannot decode is a mismatch too
                mismatches.append({"id": execution_id, "error": f"{type(exc).__name__}: {exc}"})
                continue
            if not same(result, execution.payload):
                mismatches.append(
                    {"id": execution_id, "payload": repr(execution.payload), "result": repr(result)}
                )
    return {"checked": len(args["ids"]), "mismatches": mismatches[:10], "count": len(mismatches)}


async def cmd_resubmit_read(args: dict[str, Any]) -> dict[str, Any]:
    """What the reference does when it submits again what it reads, under the same key."""
    outcomes: list[str] = []
    async with client(args) as c:
        for index, execution_id in enumerate(args["ids"]):
            read = await c.get(execution_id)
            try:
                again = await c.submit(
                    read.task_name,
                    read.payload,
                    metadata=dict(read.metadata),
                    idempotency_key=f"p-{index}",
                )
                outcomes.append("same" if str(again.id) == execution_id else f"other {again.id}")
            except ExecutionConflict:
                outcomes.append("conflict")
    return {"outcomes": outcomes}


# JSON documents as an HTTP client writes them: numbers in every spelling JSON allows, strings
# escaped or not, objects that look like tags, integers beyond 64 bits.
def number_texts() -> st.SearchStrategy[str]:
    return st.one_of(
        INTS.map(str),
        st.just("-0"),
        FLOATS.flatmap(
            lambda f: st.sampled_from(
                [repr(f), format(f, "e"), format(f, "E"), "%.17g" % f, "%.3e" % f]
            )
        ),
    )


def string_text(value: str, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def json_documents() -> st.SearchStrategy[str]:
    leaves = st.one_of(
        st.sampled_from(["null", "true", "false"]),
        number_texts(),
        st.builds(string_text, TEXT, st.booleans()),
        st.uuids().map(lambda u: json.dumps({TAG: {"type": "uuid", "value": str(u)}})),
        st.just('{"$onestep": {"type": "tuple", "values": [1, 2]}}'),
    )

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        def obj(pairs: list[tuple[str, str]]) -> str:
            unique = dict(pairs)
            return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in unique.items()) + "}"

        return st.one_of(
            st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
            st.lists(st.tuples(KEYS, inner), max_size=4).map(obj),
        )

    return st.recursive(leaves, extend, max_leaves=12)


def json_objects() -> st.SearchStrategy[str]:
    return st.lists(
        st.tuples(KEYS.filter(lambda k: k != "onestep.execution"), json_documents()), max_size=3
    ).map(lambda pairs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in dict(pairs).items()) + "}")


def post(url: str, key: str, body: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        data=body.encode("utf-8"),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


async def cmd_http_json(args: dict[str, Any]) -> dict[str, Any]:
    task, url = args["task"], args["url"]
    payloads = examples(json_documents(), args["count"], args["seed"])
    metadatas = examples(json_objects(), args["count"], args["seed"] + 1)
    mismatches: list[dict[str, Any]] = []
    checked = conflicts = 0
    async with client(args) as c:
        for index, (payload, metadata) in enumerate(zip(payloads, metadatas)):
            key = f"h-{index}"
            body = f'{{"task_name": {json.dumps(task)}, "payload": {payload}, "metadata": {metadata}}}'
            python_first = index % 2 == 0

            async def through_python() -> str | None:
                try:
                    execution = await c.submit(
                        task, json.loads(payload), metadata=json.loads(metadata), idempotency_key=key
                    )
                    return str(execution.id)
                except (ValueError, ExecutionEncodingError, ExecutionConflict) as exc:
                    return f"{type(exc).__name__}: {exc}"

            if python_first:
                from_python = await through_python()
                status, answer = post(url, key, body)
            else:
                status, answer = post(url, key, body)
                from_python = await through_python()
            checked += 1
            from_http = answer.get("id") if status == 202 and isinstance(answer, dict) else None
            if from_http is None or from_http != from_python:
                mismatches.append(
                    {"key": key, "body": body, "python": from_python, "http": [status, answer]}
                )
                continue
            # Different content under the used key is a conflict on both sides: one more
            # digit on an integer, or one more array element.
            other = f"[{payload}, 100000000000000000001]"
            other_body = f'{{"task_name": {json.dumps(task)}, "payload": {other}, "metadata": {metadata}}}'
            status, answer = post(url, key, other_body)
            try:
                await c.submit(task, json.loads(other), metadata=json.loads(metadata), idempotency_key=key)
                python_conflict = False
            except ExecutionConflict:
                python_conflict = True
            if status == 409 and python_conflict:
                conflicts += 1
            else:
                mismatches.append(
                    {"key": key, "other_body": other_body, "http": [status, answer], "python_conflict": python_conflict}
                )
        # Two integers that one float cannot tell apart are two submissions.
        first = f'{{"task_name": {json.dumps(task)}, "payload": {{"n": 100000000000000000000}}}}'
        second = first.replace("100000000000000000000", "100000000000000000001")
        answers = [post(url, "big-pair", first), post(url, "big-pair", second)]
        execution = await c.submit(task, {"n": 10**20}, idempotency_key="big-pair")
        if [status for status, _ in answers] != [202, 409] or answers[0][1].get("id") != str(execution.id):
            mismatches.append({"key": "big-pair", "http": answers, "python": str(execution.id)})
        # The case first reported: Python first with 10**20, then the same JSON over HTTP.
        execution = await c.submit(task, {"n": 10**20}, idempotency_key="big-python-first")
        status, answer = post(url, "big-python-first", first)
        if status != 202 or answer.get("id") != str(execution.id):
            mismatches.append({"key": "big-python-first", "http": [status, answer], "python": str(execution.id)})
    return {"checked": checked, "conflicts": conflicts, "mismatches": mismatches[:10], "count": len(mismatches)}


COMMANDS = {
    "create-tables": cmd_create_tables,
    "submit-generated": cmd_submit_generated,
    "check-echoed": cmd_check_echoed,
    "resubmit-read": cmd_resubmit_read,
    "http-json": cmd_http_json,
}


def run_command(name: str, args: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, **asyncio.run(COMMANDS[name](args))}
    except Exception as exc:
        traceback.print_exc()
        return {"ok": False, "error": type(exc).__name__, "message": str(exc)}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] != "session":
        print("usage: roundtrip.py session", file=sys.stderr)
        return 2
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        request = json.loads(line.decode("utf-8"))
        print(json.dumps(run_command(request["command"], request["args"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
