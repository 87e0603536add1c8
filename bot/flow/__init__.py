"""Layer 8, flow: how a message moves through the desk.

The router (agent or human?), inbound events from channels, provider fronts, sibling agents
and shared lines. Imports layers 0–7 (down to the agents and tools).
"""
