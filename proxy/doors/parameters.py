"""Which of a request's parameters reach the provider: a door drops what it cannot
carry, and of the parameters not every model takes, those this model does not are
removed from the request and said (with `drop_params` false, refused with a 400).
Whether a model takes a parameter is asked of the caller's `supports`, by LiteLLM's list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.doors.base import Inbound
from proxy.errors import InvalidRequest, ProxyError
from proxy.upstream.native import Native

__all__ = ["Supports", "field_label", "not_sent"]

# Whether a model (the first argument) takes a parameter (the second).
Supports = Callable[[str, str], bool]


def not_sent(
    inbound: Inbound,
    native: Native | None,
    supports: Supports,
    *,
    refuse: bool,
    unsent: Sequence[str] = (),
) -> list[str]:
    """What the request carries that will not reach the provider: what the door could
    not carry, and the optional parameters this model does not take (removed here).
    In the door's own API (`native`), what that API does not have, and its optional
    fields this model does not take. Then the door's `unsent` headers it carries.
    With `refuse` (`drop_params` false), a parameter the model does not take is a 400."""
    model = inbound.body["model"]
    dropped = list(inbound.native_dropped if native else inbound.dropped)
    if native:
        dropped += _native_optional(native, model, supports, refuse)
    else:
        dropped += _chat_optional(inbound.body, inbound.optional, model, supports, refuse)
    return dropped + list(unsent)


def _native_optional(native: Native, model: str, supports: Supports, refuse: bool) -> list[str]:
    """The door's own fields this model does not take, left out of the native request."""
    dropped = []
    for name, parameter in native.optional:
        if not supports(model, parameter) and native.drop(name):
            if refuse:
                raise _not_taken(model, name)
            dropped.append(name)
    return dropped


def _chat_optional(
    body: dict[str, Any],
    groups: tuple[tuple[str, ...], ...],
    model: str,
    supports: Supports,
    refuse: bool,
) -> list[str]:
    """Of each group of alternatives the body holds, the first the model takes is kept
    and the rest removed; where it takes none, all of them are removed and said."""
    dropped: list[str] = []
    for group in groups:
        present = [name for name in group if name in body]
        kept = next((n for n in present if supports(model, n)), None)
        if kept is None and present and refuse:
            raise _not_taken(model, present[0])
        for name in present:
            if name != kept:
                del body[name]
        if kept is None:
            dropped += present
    return dropped


def _not_taken(model: str, name: str) -> ProxyError:
    return InvalidRequest(
        f"The model `{model}` does not take `{name}` (drop_params is false).",
        code="unsupported_parameter",
        param=name,
    )


# Dropped fields counted under their own name; any other is counted as `other`, so a
# client cannot grow the metric's label set.
_LABELLED = frozenset(
    {
        "client_metadata",
        "container",
        "context_management",
        "mcp_servers",
        "reasoning",
        "reasoning_effort",
        "response_format",
        "thinking",
        "thinking.adaptive",
        "top_k",
    }
)


def field_label(name: str) -> str:
    """A dropped field's metric label: `tools` for any tool, `output_config` for any of
    its keys, a known field's own name, else `other`."""
    head = name.split(".", 1)[0]
    if head in ("tools", "output_config"):
        return head
    return name if name in _LABELLED else "other"
