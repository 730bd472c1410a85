"""`POST /v1/responses` (and `/v1/responses/compact`): OpenAI's Responses API. `door`
serves it, delegating: `request` translates it into the conversation model, `items`
names responses and their output items (so `previous_response_id` and `item_reference`
are served from the store), `response` writes a completion as the response object,
`stream` frames the Responses events. `native` speaks it to an OpenAI deployment:
`render` writes the planned window back as input items, `events` reads the deployment's
stream. `compact` answers Codex's compaction.
"""

from proxy.doors.responses.compact import CompactDoor
from proxy.doors.responses.door import ResponsesDoor
from proxy.doors.responses.items import ResponseIds

__all__ = ["CompactDoor", "ResponseIds", "ResponsesDoor"]
