"""Integrations: the desk inside the agent frameworks people build with (LangGraph,
PydanticAI, the OpenAI Agents SDK).

A layer above `bot/clients/`: each module turns one framework's human-in-the-loop primitive
into desk requests through the typed client, as any agent running elsewhere would, over
HTTP. Nothing below imports them, and each imports its framework only when it is imported
itself, so the framework stays an optional extra (`pip install handoff-desk[langgraph]`).
"""
