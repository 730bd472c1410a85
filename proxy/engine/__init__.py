"""The session engine: one turn, whatever the door. Reconcile what the client sent with
the stored session (`reconcile`, `history`), budget it (`budget`, `calibration`), plan
the window (`window`, pure, and `planning`, its I/O), fold history into summaries
(`summarizer`), bring back recalled history and remembered facts (`archive`,
`remembering`), answer side requests (`agent_compaction`), store the turn (`turn`) and
record what it sent (`records`). It knows budgets and nothing about wire formats: it may
import every package below it (summary, recall, facts, memory, sessions, upstream,
conversation, observability, config), never a door or `proxy.http`.
"""
