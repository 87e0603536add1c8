"""Layer 5, domain: the state the desk keeps and the rules that change it.

Conversations, the handoff state machine, approvals, user actions, idle timers, the resume
message, template rendering and declared actions. Imports layers 0–4, channels/ and forms/.
"""
