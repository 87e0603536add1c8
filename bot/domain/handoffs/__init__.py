"""The handoff lifecycle: request → dispatching → active (bypass) → released, or → failed.

The story of one handoff. The agent's `handoff_request` stores a handoff `dispatching` and
its dispatch, and sends it inline (`requesting.py`, `dispatch.py`). Once the channel confirms,
the handoff becomes `active` from the dispatch's receipt (`activation.py`): from then on the
subscriber's messages go to a person and the person's replies come back (`relay.py`), the
agent stands aside. It ends `released` (`release.py`): by the return form, a `/release`, the
owner, a sibling agent or the idle timer, with a resume message the agent reads on its
next turn. A dispatch nobody received ends it `failed` instead, and the agent answers.

Every transition is one conditional UPDATE on the handoff's row (compare-and-set on its
state), committed together with its audit event, what it tells the subscriber and the
people (`notices.py`) and, for a release, the resume message. When two paths race (a form
submission and the idle timer, say) exactly one UPDATE matches and each loser is recorded
as a no-op. Nothing holds a transaction open across a network call: the dispatch is stored,
committed, delivered, and only then activated, in a transaction of its own; a crash between
the two is settled by the sweep (`recover_dispatches`).

A handoff may go to a channel or to a route: a ladder of steps (`bot/domain/ladder.py`). On a
route every channel of a step is notified at once (fan-out), the first delivered answers the
request, and the first person to claim it has it (`claims.py`): their thread becomes its one
line. Nobody claiming within a step's `claim_within` moves the ladder on, and past the last
step it is released as `unclaimed` (`escalation.py`).

The rooms:
- `service.py`: `Handoffs`, the face: builds the rooms and exposes their methods;
- `context.py`: the dependencies every room shares, and the reads and measures several need;
- `inputs.py`: the tools' input models, the `/release` command, the stored return fields;
- `outcomes.py`: results, refusals and signals (facts, worded by `bot/tools/handoff.py`);
- `requesting.py`, `dispatch.py`: the request, the brief and its dispatches;
- `activation.py`: leaving `dispatching` (activated or failed), and recovery after a stop;
- `notices.py`: what the desk says to the subscriber and on the handoff's lines;
- `relay.py`: messages both ways, and the activity check each runs;
- `claims.py`, `escalation.py`: a route's first-to-claim and its ladder;
- `release.py`: the end of the bypass, and what the idle timer asks;
- `reads.py`: who is on the line, which handoff a thread belongs to.

What others react to (the idle timer, a sibling agent, the agent's resume turn) is a signal
recorded in the changing transaction and heard after its commit (`bot/runtime/signals.py`).
"""

from bot.domain.handoffs.activation import ACTIVATION_GRACE
from bot.domain.handoffs.context import UNKNOWN_WAIT
from bot.domain.handoffs.inputs import (
    EXTRA_CONTEXT_MAX_BYTES,
    HandoffReleaseInput,
    HandoffRequestInput,
    OutcomeInput,
    parse_release_command,
    stored_fields,
)
from bot.domain.handoffs.outcomes import (
    ChannelUnavailable,
    ClaimResult,
    DispatchFailed,
    EscalationDue,
    HandoffActivated,
    HandoffAlreadyOpen,
    HandoffClaimed,
    HandoffReleased,
    HandoffRequestRefused,
    HandoffStarted,
    HeldMessagesOrphaned,
    NotActive,
    OnTheLine,
    ReleaseResult,
    RouteClosed,
    Speaking,
)
from bot.domain.handoffs.service import Handoffs

__all__ = [
    "ACTIVATION_GRACE",
    "EXTRA_CONTEXT_MAX_BYTES",
    "UNKNOWN_WAIT",
    "ChannelUnavailable",
    "ClaimResult",
    "DispatchFailed",
    "EscalationDue",
    "HandoffActivated",
    "HandoffAlreadyOpen",
    "HandoffClaimed",
    "HandoffReleaseInput",
    "HandoffReleased",
    "HandoffRequestInput",
    "HandoffRequestRefused",
    "HandoffStarted",
    "Handoffs",
    "HeldMessagesOrphaned",
    "NotActive",
    "OnTheLine",
    "OutcomeInput",
    "ReleaseResult",
    "RouteClosed",
    "Speaking",
    "parse_release_command",
    "stored_fields",
]
