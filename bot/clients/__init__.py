"""Layer 11, clients: code that talks to a running desk from outside, over its HTTP API.

The Python HTTP client (`from bot.clients.client import DeskClient`) and the MCP bridge
that serves the tools over the Model Context Protocol. Imports layers 0–10.
"""
