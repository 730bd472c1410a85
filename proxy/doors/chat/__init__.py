"""`POST /v1/chat/completions`: the conversation model's own shape, relayed as it came."""

from proxy.doors.chat.door import ChatDoor

__all__ = ["ChatDoor"]
