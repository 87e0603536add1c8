"""Handoff Desk's core, one sub-package per layer, lowest first.

errors (0) · runtime (1) · config (2) · store (3) · delivery (4) · domain (5) · tools (6) ·
agents (7) · flow (8) · desk (9, the composition root) · web (10) · clients (11) · cli, demo (12).
A module imports only from its own layer or lower ones; tests/test_layers.py checks it.
`channels/` (the providers) and `forms/` sit beside `bot/` and import its layers 0–5 only.
"""
