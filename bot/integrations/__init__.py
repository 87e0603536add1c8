"""Layer 12, integrations: the desk's people inside agent frameworks, through the typed client.

Each module adapts one framework's own human-in-the-loop primitive to the desk and imports
that framework, so each is an optional extra (`pip install 'handoff-desk[pydantic-ai]'`, …)
and nothing else in bot/ imports them. Imports layers 0–11.
"""
