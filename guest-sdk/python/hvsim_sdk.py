"""hvsim guest SDK for Python (standard library only).

Assertions and lifecycle events for programs tested under hvsim, written as
JSON lines in the shapes the Antithesis SDKs use (hvsim's
docs/sdk-protocol.md) to $HVSIM_SDK_OUTPUT (under hvsim, /run/hvsim/sdk: a
file of the guest kernel, where every line written is one message to the
VMM), else $ANTITHESIS_SDK_LOCAL_OUTPUT, else nowhere.

    import hvsim_sdk as sdk
    sdk.init()                    # registers every assertion in the program
    sdk.setup_complete({"nodes": 3})
    sdk.always(balance >= 0, "balance never negative")
    sdk.sometimes(retried, "a request is sometimes retried")

init() finds the program's assertions by reading its source (calls of this
module's assertion functions with a literal message), so assertions that
are never reached still appear in hvsim's report.
"""

import ast
import inspect
import json
import os
import sys
import threading

_KINDS = {
    "always": ("Always", "always", True),
    "always_or_unreachable": ("AlwaysOrUnreachable", "always", False),
    "sometimes": ("Sometimes", "sometimes", True),
    "reachable": ("Reachable", "reachability", True),
    "unreachable": ("Unreachable", "reachability", False),
    "always_greater_than": ("AlwaysGreaterThan", "always", True),
    "always_greater_than_or_equal_to": ("AlwaysGreaterThanOrEqualTo", "always", True),
    "always_less_than": ("AlwaysLessThan", "always", True),
    "always_less_than_or_equal_to": ("AlwaysLessThanOrEqualTo", "always", True),
    "sometimes_greater_than": ("SometimesGreaterThan", "sometimes", True),
    "sometimes_greater_than_or_equal_to": ("SometimesGreaterThanOrEqualTo", "sometimes", True),
    "sometimes_less_than": ("SometimesLessThan", "sometimes", True),
    "sometimes_less_than_or_equal_to": ("SometimesLessThanOrEqualTo", "sometimes", True),
    "sometimes_all": ("SometimesAll", "sometimes", True),
}
# Where the message is among each function's positional arguments.
_MESSAGE_ARG = {name: (0 if name in ("reachable", "unreachable") else 2 if "_than" in name else 1) for name in _KINDS}

_lock = threading.Lock()
_fd = None


def _output_fd():
    global _fd
    if _fd is None:
        path = os.environ.get("HVSIM_SDK_OUTPUT") or os.environ.get("ANTITHESIS_SDK_LOCAL_OUTPUT")
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else -1
    return _fd


def emit(obj):
    """Writes one protocol line with a single write, so lines never mix."""
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    with _lock:
        fd = _output_fd()
        if fd >= 0:
            os.write(fd, line)


def set_output(path):
    """Sends output to `path` instead of the environment's choice (for tests)."""
    global _fd
    with _lock:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _assertion(kind, message, hit, condition, location, details):
    display, assert_type, must_hit = _KINDS[kind]
    return {"antithesis_assert": {
        "id": message, "message": message, "condition": bool(condition), "hit": hit,
        "must_hit": must_hit, "assert_type": assert_type, "display_type": display,
        "location": location, "details": details,
    }}


def _caller_location():
    # This function <- _hit or _numeric <- the public function <- the caller.
    frame = inspect.currentframe().f_back.f_back.f_back
    return {"class": "", "function": frame.f_code.co_name, "file": frame.f_code.co_filename,
            "begin_line": frame.f_lineno, "begin_column": 0}


def _hit(kind, message, condition, details):
    emit(_assertion(kind, message, True, condition, _caller_location(), details))


def init(*paths):
    """Announces the SDK and registers every assertion found in the program's
    source (the main script, plus any `paths` given)."""
    emit({"antithesis_sdk": {"language": {"name": "Python", "version": sys.version.split()[0]},
                             "sdk_version": "0.1.0", "protocol_version": "1.0.0"}})
    files = list(paths)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        files.insert(0, main)
    for path in files:
        for kind, message, line, function in _find_assertions(path):
            location = {"class": "", "function": function, "file": path, "begin_line": line, "begin_column": 0}
            emit(_assertion(kind, message, False, False, location, None))


def _find_assertions(path):
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError):
        return []
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            if isinstance(child, ast.Call):
                f = child.func
                kind = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                i = _MESSAGE_ARG.get(kind)
                if i is not None and len(child.args) > i and isinstance(child.args[i], ast.Constant) \
                        and isinstance(child.args[i].value, str):
                    found.append((kind, child.args[i].value, child.lineno, function))
            visit(child, name)

    visit(tree, "<module>")
    return found


def always(condition, message, details=None):
    _hit("always", message, condition, details)


def always_or_unreachable(condition, message, details=None):
    _hit("always_or_unreachable", message, condition, details)


def sometimes(condition, message, details=None):
    _hit("sometimes", message, condition, details)


def reachable(message, details=None):
    _hit("reachable", message, True, details)


def unreachable(message, details=None):
    _hit("unreachable", message, True, details)


def _numeric(kind, left, right, message, details):
    cond = {"greater_than": left > right, "greater_than_or_equal_to": left >= right,
            "less_than": left < right, "less_than_or_equal_to": left <= right}[kind.split("_", 1)[1]]
    maximize = kind in ("always_less_than", "always_less_than_or_equal_to",
                        "sometimes_greater_than", "sometimes_greater_than_or_equal_to")
    emit({"antithesis_guidance": {"guidance_type": "numeric", "id": message, "message": message,
                                  "maximize": maximize, "guidance_data": {"left": left, "right": right},
                                  "hit": True}})
    d = dict(details or {})
    d.update({"left": left, "right": right})
    emit(_assertion(kind, message, True, cond, _caller_location(), d))


def always_greater_than(left, right, message, details=None):
    _numeric("always_greater_than", left, right, message, details)


def always_greater_than_or_equal_to(left, right, message, details=None):
    _numeric("always_greater_than_or_equal_to", left, right, message, details)


def always_less_than(left, right, message, details=None):
    _numeric("always_less_than", left, right, message, details)


def always_less_than_or_equal_to(left, right, message, details=None):
    _numeric("always_less_than_or_equal_to", left, right, message, details)


def sometimes_greater_than(left, right, message, details=None):
    _numeric("sometimes_greater_than", left, right, message, details)


def sometimes_greater_than_or_equal_to(left, right, message, details=None):
    _numeric("sometimes_greater_than_or_equal_to", left, right, message, details)


def sometimes_less_than(left, right, message, details=None):
    _numeric("sometimes_less_than", left, right, message, details)


def sometimes_less_than_or_equal_to(left, right, message, details=None):
    _numeric("sometimes_less_than_or_equal_to", left, right, message, details)


def sometimes_all(named_bools, message, details=None):
    """At least once, every one of the named conditions holds at the same time."""
    emit({"antithesis_guidance": {"guidance_type": "boolean", "id": message, "message": message,
                                  "maximize": True, "guidance_data": dict(named_bools), "hit": True}})
    _hit("sometimes_all", message, all(named_bools.values()), details)


def setup_complete(details=None):
    """The system is ready: hvsim's explorer takes its root snapshot here."""
    emit({"antithesis_setup": {"status": "complete", "details": details}})


def stop_faults(seconds):
    """Pauses every fault for `seconds` of virtual time (the network heals,
    crashed nodes come back): what `$ANTITHESIS_STOP_FAULTS SECONDS` does."""
    emit({"hvsim_faults": {"pause": float(seconds)}})


def send_event(name, details=None):
    """A named event, counted in the report."""
    emit({name: details})


def coverage(edges):
    """Reports edges of a coverage map (hvsim extension)."""
    emit({"hvsim_coverage": {"edges": list(edges)}})


def get_random():
    """A random 64-bit integer from the run's seeded stream (under hvsim:
    /dev/hvsim), else from the operating system. Under hvsim the draw is
    announced first ({"hvsim_draw": ...}): the explorer may snapshot there
    and choose the value in later branches."""
    return _draw(None)


def _draw(options):
    v = _ask({"hvsim_draw": {"options": options} if options else {}})
    return v if v is not None else int.from_bytes(os.urandom(8), "little")


def _ask(message):
    """Sends `message` on /dev/hvsim and reads its 8-byte answer (a draw's
    value, a buggify verdict); None outside hvsim."""
    try:
        fd = os.open("/dev/hvsim", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        os.write(fd, json.dumps(message).encode())
        b = os.read(fd, 8)
    finally:
        os.close(fd)
    return int.from_bytes(b, "little") if len(b) == 8 else None


def buggify(name):
    """Buggify (FoundationDB's BUGGIFY, docs/faults.md#buggify): whether the
    site `name` misbehaves now. In each timeline a site is enabled or not
    (1 in 4), decided by hvsim the first time the timeline reaches it after
    setup complete, the same for every process; an enabled site fires 1 time
    in 4 it is reached. Never fires outside hvsim or before setup complete."""
    return bool(_ask({"hvsim_buggify": {"name": str(name)}}))


def random_choice(items):
    """One of `items`, chosen with get_random (None if empty)."""
    items = list(items)
    return items[_draw(len(items)) % len(items)] if items else None
