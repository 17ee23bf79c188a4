"""The broker's rule for queue and partition names, checked on the client where a bad name would
otherwise fill a buffer with items the broker can only refuse, or send a pop to another route
(an HTTP client drops a ``.`` or ``..`` path segment)."""

from __future__ import annotations

from lanes._exceptions import InvalidNameError

MAX_NAME_BYTES = 512  # the broker's limit on a queue or partition name

# The broker's white space: Unicode's White_Space, as Go's unicode.IsSpace. str.isspace()
# differs: it also counts U+001C..U+001F, which the broker takes as names.
_BROKER_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _blank(value: str) -> bool:
    """True for "" and a name of only the broker's white space."""
    if value and value[0] not in _BROKER_SPACE:  # most names: no generator to start
        return False
    return all(ch in _BROKER_SPACE for ch in value)


def _name_problem(value: str) -> str:
    """Why the broker refuses ``value`` as a name, or ""."""
    if value in (".", ".."):
        return 'must not be "." or ".." (URL clients drop such path segments)'
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "must be valid UTF-8 (no lone surrogates)"
    if size > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    if "\0" in value:
        return "must not contain a NUL character"
    return ""


def check_names(op: str, queue: str, partition: str | None) -> None:
    """Raise :class:`InvalidNameError` (naming ``op``) for a queue or partition the broker
    refuses; an empty or absent partition means "Default"."""
    problem = "must be a non-empty string" if _blank(queue) else _name_problem(queue)
    if problem:
        raise InvalidNameError("queue", queue, problem, op)
    if partition and _blank(partition):
        raise InvalidNameError("partition", partition, "must hold more than white space", op)
    if partition and (problem := _name_problem(partition)):
        raise InvalidNameError("partition", partition, problem, op)


def check_group(op: str, group: str | None, in_path: bool = False) -> None:
    """Raise :class:`InvalidNameError` (naming ``op``) for a consumer group name of only white
    space, which the broker refuses on a pop or seek and would take as a group of its own
    elsewhere (an ack, a delete). An empty or absent group means no group (queue mode, or every
    group), except on a route that names the group in its path (``in_path``), where "" would
    reach another route."""
    if not group:
        if in_path:
            raise InvalidNameError("group", group or "", "must be a non-empty string", op)
        return
    if _blank(group):
        raise InvalidNameError("group", group, "must hold more than white space", op)
