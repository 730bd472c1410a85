"""Small sessions for store tests."""

from __future__ import annotations

from proxy.sessions import Checkpoint, Session, reconcile


def make_session(tenant: str = "t1", session_id: str = "s", text: str = "hello") -> Session:
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "hi"}]
    session = reconcile(None, messages, tenant=tenant, session_id=session_id, now=1.0).session
    session.transcript[0].tokens["tiktoken:o200k"] = 2
    session.checkpoints.append(Checkpoint(1, session.head, "sum", 3, "m", 1.0))
    return session


def next_version(session: Session, *texts: str) -> Session:
    """The session after a client resent it with new user messages."""
    messages = [*(m.message for m in session.transcript)]
    messages += [{"role": "user", "content": text} for text in texts]
    sid = session.session_id
    return reconcile(session, messages, tenant=session.tenant, session_id=sid, now=2.0).session
