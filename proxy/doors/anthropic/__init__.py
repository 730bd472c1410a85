"""`POST /v1/messages`: Anthropic's Messages API. `door` translates it to and from
the conversation model, `native` renders the planned window back into Messages for an
Anthropic deployment, `stream` frames Anthropic's SSE events.
"""
