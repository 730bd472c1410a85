"""The session engine: one turn, whatever the door (`turn`: the `Engine`). A request's
facts are worked out once (`intake`, `types`); what the client sent is reconciled with
the stored session (`reconcile`, `history`) and budgeted (`budget`, `calibration`); the
window is planned (`window`, pure, and `planning`, its I/O), history folded into
summaries (`summarizer`, `breaker`), recalled history and remembered facts brought back
(`archive`, `remembering`), agents' own compactions served (`agent_compaction`,
`chapters`); a stream's events are relayed (`events`), the turn stored (`commit`) and
what it sent recorded (`records`). It knows budgets and nothing about wire formats: it
may import every package below it (summary, recall, facts, memory, sessions, upstream,
conversation, observability, config), never a door or `proxy.http`.
"""
