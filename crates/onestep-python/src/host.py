"""onestep Python host: runs the user's handler functions for the Rust onestep runtime.

Shipped inside the onestep binary (crate onestep-python) and started with the user's interpreter;
needs nothing beyond the standard library and the user's own code.

Protocol: frames of a 4-byte big-endian length and a UTF-8 JSON object, read from the process's
standard input and written to its standard output. Before user code is imported both are moved to
private descriptors: fd 0 then reads /dev/null and fd 1 writes to standard error, so a print() in a
handler cannot corrupt a frame.

Rust -> host: {"op": "load", "id", "refs"}, {"op": "call", "id", "ref", "params", "codec",
"payload", "ctx"}, {"op": "callback", "id", "ref", "params", "codec", "args", "truth", "discard", "ctx"?},
{"op": "cancel", "id"}, {"op": "reply", "rid", "ok", "value" | "error"}. A callback (a hook,
transform, predicate or event subscriber) gets its args as the reference's invoke_callback passes
them: only as many positional args as the function takes; each arg is {"ctx": true},
{"value": v}, {"failure": {...}}, {"event": {...}} or {"app": {...}}.
Host -> Rust: {"op": "ready"}, {"op": "loaded", "id", "errors"}, {"op": "result", "id", "ok",
"value" | "error" | "cancelled"}, {"op": "request", "id", "rid", "what", ...},
{"op": "log", "level", "logger", "message", "exc_info"?}: every logging record, which the Rust
runtime logs with its own subscriber (text or the reference's JSON lines);
{"op": "control", "what": "request_shutdown"}: app.request_shutdown(); {"op": "metric", "task",
"name", "kind", "labels", "value"}: a ctx.metrics update (a counter's increment, a gauge's value);
{"op": "progress", "id", "value"}: ctx.report_progress(value) of a tracked execution's call (only
sent when the call's ctx carries "progress_limit", the most bytes the value may take as JSON).

Run as `python host.py --check REF...` it imports each ref and prints one JSON report instead.
"""

import asyncio
import base64
import copy
import functools
import importlib
import inspect
import json
import logging
import math
import os
import struct
import sys
import threading
import traceback
from datetime import datetime
from decimal import Decimal
from enum import Enum
from collections.abc import Mapping
from uuid import UUID

TAG = "$onestep"


# --- the tagged codec (the reference's onestep.capture.codec, ported) --------------------------


class CaptureEncodingError(ValueError):
    pass


def _pointer(path, token):
    return path + "/" + token.replace("~", "~0").replace("/", "~1")


def _type_name(value):
    cls = type(value)
    return cls.__module__ + "." + cls.__qualname__


def _replayable(cls, path):
    module = sys.modules.get(cls.__module__)
    resolved = module
    if "<locals>" in cls.__qualname__.split("."):
        raise CaptureEncodingError("cannot encode %s at %s: local recorded type is not replayable" % (_type_name_of(cls), path or "/"))
    for part in cls.__qualname__.split("."):
        resolved = getattr(resolved, part, None) if resolved is not None else None
    if resolved is not cls:
        raise CaptureEncodingError("cannot encode %s at %s: recorded type is not replayable from the loaded module" % (_type_name_of(cls), path or "/"))


def _type_name_of(cls):
    return cls.__module__ + "." + cls.__qualname__


def _tag(type_name, **fields):
    return {TAG: dict(type=type_name, **fields)}


def encode_value(value, path=""):
    if isinstance(value, Enum):
        cls = type(value)
        _replayable(cls, path)
        return _tag("enum", module=cls.__module__, qualname=cls.__qualname__, name=value.name,
                    value=encode_value(value.value, _pointer(path, "value")))
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise CaptureEncodingError("cannot encode builtins.float at %s: non-finite float" % (path or "/"))
        return value
    if type(value) is datetime:
        return _tag("datetime", value=value.isoformat(), fold=value.fold)
    if type(value) is UUID:
        return _tag("uuid", value=str(value))
    if type(value) is bytes:
        return _tag("bytes", value=base64.b64encode(value).decode("ascii"))
    if type(value) is Decimal:
        return _tag("decimal", value=str(value))
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        cls = type(value)
        _replayable(cls, path)
        fields = tuple(cls._fields)
        return _tag("namedtuple", module=cls.__module__, qualname=cls.__qualname__, fields=list(fields),
                    values=[encode_value(item, _pointer(path, f)) for f, item in zip(fields, value)])
    if type(value) is tuple:
        return _tag("tuple", values=[encode_value(item, _pointer(path, str(i))) for i, item in enumerate(value)])
    if type(value) in (set, frozenset):
        encoded = [encode_value(item, _pointer(path, "set")) for item in value]
        encoded.sort(key=lambda item: json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=True))
        return _tag("frozenset" if type(value) is frozenset else "set", values=encoded)
    if type(value) is list:
        return [encode_value(item, _pointer(path, str(i))) for i, item in enumerate(value)]
    if type(value) is dict:
        for key in value:
            if not isinstance(key, str):
                raise CaptureEncodingError("cannot encode %s at %s: mapping keys must be strings" % (_type_name(key), path or "/"))
        if TAG in value:
            return _tag("mapping", items=[[k, encode_value(v, _pointer(path, k))] for k, v in value.items()])
        return {k: encode_value(v, _pointer(path, k)) for k, v in value.items()}
    raise CaptureEncodingError("cannot encode %s at %s: unsupported value type" % (_type_name(value), path or "/"))


def _fields(payload, names, path, type_name):
    if set(payload) != {"type", *names}:
        raise ValueError("invalid %s tag fields at %s" % (type_name, path or "/"))


def _loaded_type(module_name, qualname, path):
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise ValueError("invalid recorded type at %s" % (path or "/"))
    module = sys.modules.get(module_name)
    if module is None:
        raise ValueError("recorded module %r is not loaded at %s" % (module_name, path or "/"))
    resolved = module
    for part in qualname.split("."):
        resolved = getattr(resolved, part)
    return resolved


def decode_value(value, path=""):
    if value is None or isinstance(value, (bool, int, str, float)):
        return value
    if isinstance(value, list):
        return [decode_value(item, _pointer(path, str(i))) for i, item in enumerate(value)]
    if TAG not in value:
        return {k: decode_value(v, _pointer(path, k)) for k, v in value.items()}
    payload = value[TAG]
    if set(value) != {TAG} or not isinstance(payload, dict):
        raise ValueError("invalid extension tag at %s" % (path or "/"))
    t = payload.get("type")
    if t == "datetime":
        _fields(payload, {"value", "fold"}, path, t)
        return datetime.fromisoformat(payload["value"]).replace(fold=payload["fold"])
    if t == "uuid":
        _fields(payload, {"value"}, path, t)
        return UUID(payload["value"])
    if t == "bytes":
        _fields(payload, {"value"}, path, t)
        return base64.b64decode(payload["value"], validate=True)
    if t == "decimal":
        _fields(payload, {"value"}, path, t)
        return Decimal(payload["value"])
    if t in ("tuple", "set", "frozenset"):
        _fields(payload, {"values"}, path, t)
        items = [decode_value(item, _pointer(path, str(i))) for i, item in enumerate(payload["values"])]
        return tuple(items) if t == "tuple" else (frozenset(items) if t == "frozenset" else set(items))
    if t == "mapping":
        _fields(payload, {"items"}, path, t)
        return {k: decode_value(v, _pointer(path, k)) for k, v in payload["items"]}
    if t == "enum":
        _fields(payload, {"module", "qualname", "name", "value"}, path, t)
        return _loaded_type(payload["module"], payload["qualname"], path)[payload["name"]]
    if t == "namedtuple":
        _fields(payload, {"module", "qualname", "fields", "values"}, path, t)
        cls = _loaded_type(payload["module"], payload["qualname"], path)
        return cls(*[decode_value(v, _pointer(path, f)) for f, v in zip(payload["fields"], payload["values"])])
    raise ValueError("unknown extension type %r at %s" % (t, path or "/"))


def plain_json(value, what):
    """The value if json.dumps takes it (as the reference's JSON sinks and stores require)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError("%s is not JSON serializable: %s" % (what, exc)) from None
    return value


# --- refs ---------------------------------------------------------------------------------------


def load_ref(ref):
    module_name, sep, attr_path = ref.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError("invalid ref %r; expected 'package.module:attr'" % ref)
    value = importlib.import_module(module_name)
    for part in attr_path.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise TypeError("ref %r did not resolve to a callable" % ref)
    return value


def is_async(func):
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None))


def describe(exc):
    """The exception as the failure record keeps it, its traceback without the host's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return {"type": type(exc).__name__, "message": str(exc), "traceback": text}


# --- the handler's context ----------------------------------------------------------------------


class Envelope:
    __slots__ = ("body", "meta", "attempts")

    def __init__(self, body, meta, attempts):
        self.body, self.meta, self.attempts = body, meta, attempts

    def __repr__(self):
        return "Envelope(body=%r, meta=%r, attempts=%r)" % (self.body, self.meta, self.attempts)


class Named:
    """ctx.app and ctx.task: the fields the reference's objects offer that apply here."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class App:
    """ctx.app and a startup/shutdown hook's app: name, config, resources, and
    request_shutdown(), which asks the Rust runtime to stop as the reference's app does."""

    def __init__(self, host, name, config, resources):
        self._host, self.name, self.config, self.resources = host, name, config, resources

    def request_shutdown(self):
        self._host.send({"op": "control", "what": "request_shutdown"})

    def __repr__(self):
        return "<App %s>" % self.name


class ScopedState:
    """ctx.state: the app's state store under "<app>:<task>", kept by the Rust runtime."""

    def __init__(self, call, scopes):
        self._call, self._scopes = call, scopes

    def scope(self, namespace):
        if not namespace:
            raise ValueError("state key must not be empty")
        return ScopedState(self._call, self._scopes + [namespace])

    async def get(self, key, default=None):
        value = await self.load(key)
        return default if value is None else value

    async def load(self, key):
        return await self._call.request("state.load", scopes=self._scopes, key=self._key(key))

    async def set(self, key, value):
        await self.save(key, value)

    async def save(self, key, value):
        await self._call.request("state.save", scopes=self._scopes, key=self._key(key),
                                 value=plain_json(value, "state value"))

    async def delete(self, key):
        await self._call.request("state.delete", scopes=self._scopes, key=self._key(key))

    @staticmethod
    def _key(key):
        if not key:
            raise ValueError("state key must not be empty")
        return key


class ResourceProxy:
    """One named resource of the app. A sink (a queue, a topic, a table sink) takes
    publish(body, meta=None) and send(envelope), carried out by the Rust runtime; anything else
    is a Rust object that cannot cross the pipe."""

    def __init__(self, call, name, runtime_name, is_sink):
        self._call, self._key, self.name, self._is_sink = call, name, runtime_name, is_sink

    def _sink(self):
        if not self._is_sink:
            raise TypeError("resource %r is not a sink: on the Rust runtime only sinks can be used "
                            "from Python (publish/send); open your own client for the rest" % self._key)

    async def publish(self, body, meta=None):
        self._sink()
        await self._call.request("resource.publish", resource=self._key, body=plain_json(body, "body"),
                                 meta=plain_json(dict(meta or {}), "meta"))

    async def send(self, envelope):
        self._sink()
        await self._call.request("resource.publish", resource=self._key,
                                 body=plain_json(envelope.body, "body"),
                                 meta=plain_json(dict(getattr(envelope, "meta", None) or {}), "meta"))

    def __repr__(self):
        return "<resource %s>" % self._key


class Resources(Mapping):
    """app.resources and ctx.resources: the YAML's resources by name."""

    def __init__(self, call, entries):
        self._proxies = {name: ResourceProxy(call, name, runtime, sink) for name, runtime, sink in entries or []}

    def __getitem__(self, name):
        return self._proxies[name]

    def __iter__(self):
        return iter(self._proxies)

    def __len__(self):
        return len(self._proxies)


class TaskContext:
    """ctx: what a handler sees of one delivery, as the reference's TaskContext."""

    def __init__(self, call, info, metrics):
        self._call = call
        self._resources = Resources(call, info.get("resources"))
        self.app = App(call.host, info["app"], info["config"], self._resources)
        self.task = Named(name=info["task"], description=info.get("description"), config=info["task_config"],
                          metadata=info.get("metadata", {}), handler_ref=info.get("handler_ref"))
        self.config = info["config"]
        self.task_config = info["task_config"]
        self.logger = logging.getLogger("onestep.%s.%s" % (info["app"], info["task"]))
        self.state = ScopedState(call, [])
        self._metrics = metrics
        self._progress_limit = info.get("progress_limit")
        self.cancelled = call.cancelled
        self._current = Envelope(call.payload, info["meta"], info["attempts"])

    @property
    def current(self):
        return self._current

    @property
    def metrics(self):
        return TaskMetrics(self._metrics, self.task.name)

    @property
    def resources(self):
        return self._resources

    async def emit(self, body, *, sink=None, meta=None):
        name = sink if sink is None or isinstance(sink, str) else getattr(sink, "name", None)
        await self._call.request("emit", sink=name, body=plain_json(body, "emitted body"),
                                 meta=plain_json(dict(meta or {}), "emitted meta"))

    def report_progress(self, value):
        """Reports how far the tracked execution got, as any JSON value ({"done": 40, "total": 100}).

        Returns at once; the runtime writes the latest value at most once a second and the last one
        before the attempt completes. Does nothing for other deliveries. Raises TypeError when the
        value is not JSON and ValueError when it is too large or holds the NUL character."""
        limit = self._progress_limit
        if limit is None:
            return
        try:
            text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise TypeError("progress is not JSON serializable: %s" % (exc,)) from None
        size = len(text.encode("utf-8"))
        if size > limit:
            raise ValueError("progress must be at most %d bytes as JSON, got %d" % (limit, size))
        if "\\u0000" in text:
            raise ValueError("progress must not contain the NUL character (\\u0000)")
        self._call.host.send({"op": "progress", "id": self._call.id, "value": value})

    async def update_current_row(self, values):
        raise RuntimeError("update_current_row() is only supported for deliveries that can mutate their current row")

    async def complete(self, values):
        raise RuntimeError("complete() is only supported for deliveries that can complete their current row atomically")


class TaskMetrics:
    """ctx.metrics: counter(name, labels=...) and gauge(name, labels=...) of one task."""

    def __init__(self, registry, task):
        self._registry, self._task = registry, task

    def counter(self, name, *, labels=None):
        return self._registry.series(self._task, name, "counter", labels or {})

    def gauge(self, name, *, labels=None):
        return self._registry.series(self._task, name, "gauge", labels or {})


class Metrics:
    """Custom counters and gauges per task, kept in this process as the reference's
    in-memory registry keeps them (names and labels validated the same way)."""

    import re as _re
    NAME = _re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    LABEL = _re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    RESERVED = frozenset({"service", "environment", "task", "instance_id", "metric"})

    def __init__(self, send=None):
        self.lock = threading.Lock()
        self.values = {}
        self.send = send

    def series(self, task, name, kind, labels):
        if not isinstance(name, str) or not self.NAME.match(name.strip()):
            raise ValueError("invalid custom metric name: %r" % (name,))
        normalized = {}
        for key, value in labels.items():
            if not isinstance(key, str) or not self.LABEL.match(key.strip()):
                raise ValueError("invalid custom metric label key: %r" % (key,))
            if key.strip() in self.RESERVED:
                raise ValueError("custom metric label %r is reserved" % key.strip())
            normalized[key.strip()] = str(value)
        key = (task, name.strip(), kind, tuple(sorted(normalized.items())))
        registry = self

        def check(amount):
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
                raise TypeError("custom metric value must be a finite int or float")
            return float(amount)

        class Series:
            def inc(self, amount=1):
                amount = check(amount)
                if amount < 0:
                    raise ValueError("counter increment must be >= 0")
                with registry.lock:
                    registry.values[key] = registry.values.get(key, 0.0) + amount
                registry.report(task, name.strip(), kind, normalized, amount)

            def set(self, value):
                value = check(value)
                with registry.lock:
                    registry.values[key] = value
                registry.report(task, name.strip(), kind, normalized, value)

        return Series()

    def report(self, task, name, kind, labels, value):
        """Tells the Rust runtime (a counter's increment, a gauge's value), which serves it at
        /metrics as the reference's exporter serves custom series."""
        if self.send is not None:
            self.send({"op": "metric", "task": task, "name": name, "kind": kind, "labels": labels,
                       "value": value})


# --- what hooks and event subscribers receive ---------------------------------------------------


class FailureKind(str, Enum):
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class FailureInfo:
    """An on_failure hook's failure, as the reference's onestep.retry.FailureInfo."""

    def __init__(self, kind, exception_type, message, traceback=None):
        self.kind = FailureKind(kind)
        self.exception_type, self.message, self.traceback = exception_type, message, traceback

    def as_dict(self):
        payload = {"kind": self.kind.value, "exception_type": self.exception_type, "message": self.message}
        if self.traceback is not None:
            payload["traceback"] = self.traceback
        return payload

    def __repr__(self):
        return "FailureInfo(kind=%r, exception_type=%r, message=%r)" % (self.kind, self.exception_type, self.message)


class TaskEventKind(str, Enum):
    FETCHED = "fetched"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    RETRIED = "retried"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"


class TaskEvent:
    """A hooks.events subscriber's event, as the reference's onestep.events.TaskEvent."""

    def __init__(self, fields):
        self.kind = TaskEventKind(fields["kind"])
        self.app, self.task, self.source = fields["app"], fields["task"], fields.get("source")
        self.attempts = fields["attempts"]
        self.emitted_at = datetime.fromisoformat(fields["emitted_at"])
        self.duration_s = fields.get("duration_s")
        failure = fields.get("failure")
        self.failure = None if failure is None else FailureInfo(**failure)
        self.meta = fields.get("meta") or {}
        self.attempt_id = fields.get("attempt_id")

    def __repr__(self):
        return "TaskEvent(kind=%r, app=%r, task=%r, attempts=%r)" % (self.kind, self.app, self.task, self.attempts)


def invoke_callback(callback, args):
    """Calls with as many positional args as the callback takes (the reference's rule)."""
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):
        return callback(*args)
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return callback(*args)
    positional = [p for p in parameters
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return callback(*args[: len(positional)])


# --- the host -----------------------------------------------------------------------------------


class Call:
    def __init__(self, host, msg):
        self.host, self.id = host, msg["id"]
        self.cancelled = threading.Event()
        self.task = None
        self.payload = None
        self.async_handler = False

    async def request(self, what, **fields):
        return await self.host.request(self.id, what, fields)


class FrameLogHandler(logging.Handler):
    """Sends each log record to the Rust runtime as a frame."""

    def __init__(self, host):
        super().__init__()
        self.host = host

    def emit(self, record):
        try:
            frame = {"op": "log", "level": record.levelno, "logger": record.name,
                     "message": record.getMessage()}
            if record.exc_info:
                frame["exc_info"] = "".join(traceback.format_exception(*record.exc_info))
            self.host.send(frame)
        except Exception:
            self.handleError(record)


class Host:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.write_lock = threading.Lock()
        self.calls = {}
        self.requests = {}
        self.next_rid = 0
        self.refs = {}
        self.metrics = Metrics(self.send)

    def send(self, msg):
        data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
        with self.write_lock:
            self.writer.write(struct.pack(">I", len(data)) + data)
            self.writer.flush()

    async def serve(self):
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader(limit=2**32)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), self.reader)
        self.send({"op": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})
        try:
            while True:
                head = await stream.readexactly(4)
                body = await stream.readexactly(struct.unpack(">I", head)[0])
                self.dispatch(json.loads(body))
        except asyncio.IncompleteReadError:
            pass
        # Rust closed the pipe: it is shutting down, nothing more will be read.
        for call in list(self.calls.values()):
            call.cancelled.set()
            if call.task is not None:
                call.task.cancel()

    def dispatch(self, msg):
        op = msg.get("op")
        if op in ("call", "callback"):
            call = Call(self, msg)
            self.calls[call.id] = call
            run = self.run_call if op == "call" else self.run_callback
            call.task = asyncio.ensure_future(run(call, msg))
        elif op == "cancel":
            call = self.calls.get(msg["id"])
            if call is not None:
                call.cancelled.set()
                if call.task is not None and call.async_handler:
                    call.task.cancel()
        elif op == "reply":
            future = self.requests.pop(msg["rid"], None)
            if future is not None and not future.done():
                if msg.get("ok"):
                    future.set_result(msg.get("value"))
                else:
                    future.set_exception(RuntimeError(msg.get("error", "request failed")))
        elif op == "load":
            errors = {}
            for ref in msg["refs"]:
                try:
                    self.resolve(ref)
                except Exception as exc:
                    errors[ref] = describe(exc)
            self.send({"op": "loaded", "id": msg["id"], "errors": errors})

    async def request(self, call_id, what, fields):
        future = asyncio.get_running_loop().create_future()
        self.next_rid += 1
        rid = self.next_rid
        self.requests[rid] = future
        self.send(dict(op="request", id=call_id, rid=rid, what=what, **fields))
        return await future

    def resolve(self, ref):
        """The function a ref names and whether it is async, imported once."""
        entry = self.refs.get(ref)
        if entry is None:
            func = load_ref(ref)
            entry = self.refs[ref] = (func, is_async(func))
        return entry

    async def run_call(self, call, msg):
        async def handler():
            func, func_is_async = self.resolve(msg["ref"])
            call.payload = decode_value(msg["payload"]) if msg["codec"] == "tagged" else msg["payload"]
            ctx = TaskContext(call, msg["ctx"], self.metrics)
            params = copy.deepcopy(msg.get("params") or {})
            if func_is_async:
                call.async_handler = True
                return await func(ctx, call.payload, **params)
            return await self.in_thread(call, functools.partial(func, ctx, call.payload, **params))

        await self.answer(call, msg, handler, "handler result")

    async def run_callback(self, call, msg):
        async def callback():
            func, func_is_async = self.resolve(msg["ref"])
            tagged = msg["codec"] == "tagged"
            args = []
            for arg in msg["args"]:
                if "value" in arg:
                    value = decode_value(arg["value"]) if tagged else arg["value"]
                    if call.payload is None:
                        call.payload = value
                    args.append(value)
                elif "ctx" in arg:
                    args.append(arg)
                elif "failure" in arg:
                    args.append(FailureInfo(**arg["failure"]))
                elif "event" in arg:
                    args.append(TaskEvent(arg["event"]))
                else:
                    app = arg["app"]
                    args.append(App(self, app["name"], app["config"], Resources(call, app.get("resources"))))
            # The context reads the payload (ctx.current.body), so it is made once that is known.
            args = [TaskContext(call, msg["ctx"], self.metrics) if isinstance(a, dict) and "ctx" in a else a
                    for a in args]
            bound = functools.partial(func, **copy.deepcopy(msg.get("params") or {}))
            if func_is_async:
                call.async_handler = True
                result = await invoke_callback(bound, args)
            else:
                result = await self.in_thread(call, functools.partial(invoke_callback, bound, args))
            if msg.get("discard"):
                return None
            return bool(result) if msg.get("truth") else result

        await self.answer(call, msg, callback, "callback result")

    async def in_thread(self, call, func):
        """Runs a sync function in the thread pool; awaits what it returns if that is awaitable."""
        result = await asyncio.get_running_loop().run_in_executor(None, func)
        if inspect.isawaitable(result):
            call.async_handler = True
            result = await result
        return result

    async def answer(self, call, msg, run, what):
        """Runs one call and sends its result frame."""
        try:
            try:
                result = await run()
                tagged = msg["codec"] == "tagged"
                value = encode_value(result) if tagged else plain_json(result, what)
                self.send({"op": "result", "id": call.id, "ok": True, "value": value})
            except asyncio.CancelledError:
                self.send({"op": "result", "id": call.id, "ok": False, "cancelled": True})
            except Exception as exc:
                self.send({"op": "result", "id": call.id, "ok": False, "error": describe(exc)})
        except (BrokenPipeError, OSError):
            pass
        finally:
            self.calls.pop(call.id, None)


def main(argv):
    paths, refs, check = [], [], False
    args = iter(argv)
    for arg in args:
        if arg == "--path":
            paths.append(next(args))
        elif arg == "--check":
            check = True
        else:
            refs.append(arg)
    for path in reversed(paths):
        if path not in sys.path:
            sys.path.insert(0, path)
    reader = os.fdopen(os.dup(0), "rb", buffering=0)
    writer = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    if check:
        report = {}
        for ref in refs:
            try:
                func = load_ref(ref)
                report[ref] = {"ok": True, "async": is_async(func)}
            except Exception as exc:
                report[ref] = dict(ok=False, **describe(exc))
        writer.write(json.dumps(report).encode("utf-8"))
        return 0
    host = Host(reader, writer)
    root = logging.getLogger()
    root.setLevel(os.environ.get("ONESTEP_PYTHON_LOG_LEVEL", "INFO").upper())
    root.addHandler(FrameLogHandler(host))
    asyncio.run(host.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
