"""`POST /v1/messages`: Anthropic's Messages API. `door` serves it, delegating: `request`
translates it into the conversation model, `response` writes a completion as its reply
(and an error in its shape), `stream` frames its SSE events. `native` speaks it to an
Anthropic deployment: `render` writes the planned window back as Anthropic's turns,
`events` reads the deployment's stream.
"""

from proxy.doors.anthropic.door import MessagesDoor
from proxy.doors.anthropic.response import anthropic_error

__all__ = ["MessagesDoor", "anthropic_error"]
