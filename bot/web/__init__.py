"""Layer 10, web: the FastAPI application and everything it serves.

The app factory, the JSON API, the web chat, the owner inbox, approval pages, shared page
helpers (pages), the inbox owner's name cookie and the uvicorn server. Imports layers 0–9;
routes declare the services they use (`handoffs: HandoffsDep`, …), which deps.py takes from
the desk in one place.
"""
