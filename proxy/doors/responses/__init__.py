"""`POST /v1/responses` (and `/v1/responses/compact`): OpenAI's Responses API.
`door` translates it to and from the conversation model, `items` names responses and
their output items (so `previous_response_id` and `item_reference` are served from the
store), `native` renders the planned window back into input items for an OpenAI
deployment, `stream` frames the Responses events, `compact` answers Codex's compaction.
"""
