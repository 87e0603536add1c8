"""The agent-framework integrations (bot/integrations/) against a real desk, offline.

Each scenario of tests/agent_scenarios.py runs for each framework of tests/agent_frameworks.py:
PydanticAI on its `FunctionModel` with `ALLOW_MODEL_REQUESTS = False`, the OpenAI Agents SDK on
its `ScriptedModel` with tracing off, so no test reaches a model provider. The desk is a real
`handoff serve` process (one per module, each test on its own conversation; the restart test
starts its own), or the same desk in-process on a `ManualClock` where a test moves time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from agents import set_tracing_disabled
from pydantic_ai import models

from bot.clients import DeskClient
from tests import agent_scenarios as scenarios
from tests.agent_desks import AGENT_KEY, ServedDesk
from tests.agent_frameworks import FRAMEWORKS
from tests.agent_scenarios import Framework

ROOT = Path(__file__).resolve().parent.parent
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
EXAMPLE_REGION = re.compile(r"^# --8<-- \[start:desk\]\n(.*?)^# --8<-- \[end:desk\]$", re.MULTILINE | re.DOTALL)

pytestmark = pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])


@pytest.fixture(autouse=True)
def offline() -> Iterator[None]:
    """No model request can leave (PydanticAI refuses them), and no trace is exported."""
    allowed, models.ALLOW_MODEL_REQUESTS = models.ALLOW_MODEL_REQUESTS, False
    set_tracing_disabled(True)
    yield
    models.ALLOW_MODEL_REQUESTS = allowed


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedDesk]:
    """One `handoff serve` for the tests that do not restart it; each test has its own conversation."""
    desk = ServedDesk(tmp_path_factory.mktemp("desk"))
    try:
        yield desk.start()
    finally:
        desk.close()


@pytest.fixture
async def desk(served: ServedDesk) -> AsyncIterator[DeskClient]:
    async with DeskClient(served.base_url, api_key=AGENT_KEY) as client:
        yield client


# Each against the served desk, on a conversation of its own.
ON_THE_SERVED_DESK = [
    scenarios.a_person_returns_data_through_the_form,  # the model's next input holds the returned data
    scenarios.a_handoff_the_desk_refuses,
    scenarios.the_subscriber_does_a_user_action,
    scenarios.a_second_run_while_one_waits,
    scenarios.two_approvals_answered_in_reverse_order,  # approved runs once, denied never, with its reason
    scenarios.a_handoff_and_an_approval_answered_in_reverse_order,
    scenarios.a_call_started_before_a_crash,
]
# Each on a desk in this process whose clock the scenario moves past a deadline.
ON_A_CLOCKED_DESK = [
    scenarios.an_approval_nobody_decides_in_time,  # never run, recorded as a timeout
    scenarios.a_handoff_nobody_answers_in_time,
]


@pytest.mark.parametrize("scenario", ON_THE_SERVED_DESK, ids=lambda scenario: scenario.__name__)
async def test_on_the_served_desk(
    framework: Framework, scenario: Callable[[Framework, DeskClient, str, Path], Awaitable[None]], desk: DeskClient,
    served: ServedDesk, tmp_path: Path,
) -> None:
    await scenario(framework, desk, served.base_url, tmp_path)


@pytest.mark.parametrize("scenario", ON_A_CLOCKED_DESK, ids=lambda scenario: scenario.__name__)
async def test_on_a_clocked_desk(
    framework: Framework, scenario: Callable[[Framework, str, Path], Awaitable[None]], sqlite_url: str, tmp_path: Path,
) -> None:
    await scenario(framework, sqlite_url, tmp_path)


async def test_the_agent_and_the_desk_killed_mid_handoff_resume_once_with_one_desk_request(
    framework: Framework, tmp_path: Path,
) -> None:
    await scenarios.agent_and_desk_killed_mid_handoff(framework, tmp_path)


def test_the_docs_page_adds_the_desk_in_under_twenty_lines_that_the_example_runs(framework: Framework) -> None:
    """The page's first Python block is its imports (which import) and then, line for line,
    the marked part of the example the restart test runs."""
    page = (ROOT / "docs" / "integrations" / framework.page).read_text()
    shown = PYTHON_BLOCK.search(page)
    assert shown is not None, f"docs/integrations/{framework.page} shows no Python block"
    imports, start, rest = shown.group(1).rstrip("\n").partition("async def answer(")
    exec(compile(imports, framework.page, "exec"), {})  # the page's own import lines import
    body = start + rest
    example = EXAMPLE_REGION.search((ROOT / "examples" / framework.example).read_text())
    assert example is not None, f"examples/{framework.example} marks no desk part"
    assert body == example.group(1).rstrip("\n"), "the page shows the example's desk part as it is"
    assert len(shown.group(1).rstrip("\n").splitlines()) < 20
