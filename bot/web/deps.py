"""How a route gets the desk: one FastAPI dependency instead of each module reading app state.

`create_app` puts the desk on `app.state`; routes declare `desk: DeskDep` and FastAPI hands it
over, so a test (or a future split of the desk into services) can swap it in one place with
`app.dependency_overrides[desk_of]`. Exception handlers, which FastAPI does not inject, call
`desk_of(request)` directly.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bot.desk import Desk


def desk_of(request: Request) -> Desk:
    """The desk the app was built around (`create_app` sets `app.state.desk`)."""
    desk: Desk = request.app.state.desk  # Starlette's app.state is untyped
    return desk


DeskDep = Annotated[Desk, Depends(desk_of)]
