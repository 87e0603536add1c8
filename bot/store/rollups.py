"""The reports' rollups: counts of the handoff and conversation facts per UTC hour or day,
kept by database triggers in the very transaction that writes a fact, and rebuilt from the
facts on demand.

Why triggers: a fact is written in many places (the request, the claim, the first reply,
the release, a migration filling in old rows, a bulk import), on SQLite and PostgreSQL, by
several instances at once. A trigger sees every one of those writes, in its transaction, so
a rollup can never disagree with the rows it counts: a write rolled back takes its counts
with it. Each count moves by an `INSERT … ON CONFLICT DO UPDATE SET n = n + excluded.n`
(the same words in both databases), which PostgreSQL applies under the rollup row's lock:
two instances counting into one row both land. An update takes the row's old values out of
their rollup rows and puts its new ones in, so a handoff whose channel, state or facts
change (a claim moves it to the claimer's channel) is always counted once, where it is now.

Why UTC hours and days: the report's timezone is chosen when it is read, and may differ from
any the desk ran in when the row was written. A local day is a stretch of UTC instants
(23, 24 or 25 hours across a DST change, shifted when a zone changes its offset); in a zone
whose offsets are whole hours every local midnight falls on a UTC hour, so a day's count is a
sum of whole UTC hours. Where a midnight falls inside an hour (India's +05:30, Nepal's
+05:45, or a range that starts at 10:17), the reports count that hour's piece from the rows
themselves (`bot/domain/reports.py`). The range figures (endings, the time histograms,
containment) are kept per UTC day and read the same way: whole UTC days from here, the
ragged ends from the rows.

The rollups (one definition each, which both the triggers and the rebuild are written from):

- `report_hours`: handoffs per (UTC hour, channel, route), with the channel's label;
- `report_endings`: handoffs per (UTC day, channel, route, ending, outcome), where the
  ending is the release reason, else the state; and how many of them lack required fields;
- `report_measures`: per (UTC day, channel, route, measure, fine bucket), how many handoffs
  have their time to a person (measure 0) or duration (measure 1) in that bucket
  (`FINE_EDGES`): the counts that locate a percentile's rank;
- `report_people`: per (UTC day, person who handled them: `handled_by`, '' for nobody
  linked, fine bucket of their time to a person or `UNTIMED`), the handoffs they handled;
- `report_people_through`: the same per channel and route too, for a summary filtered by
  one (several times the rows of `report_people`, which an unfiltered summary reads);
- `report_conversations`: subscribers' conversations per UTC day, and how many had a handoff.

Route 0 stands for "no route" (a key column cannot be NULL); route ids are positive.
Migration 0024 creates the tables and, from the definitions here, the triggers. A change to
`ROLLUPS` or to `FINE_EDGES` (written into the triggers) comes with a migration that alters
the tables, runs `drop_triggers` and `create_triggers` and rebuilds; the definitions must
keep working on the tables 0024 made, since a fresh database runs 0024 with them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

FINE_EDGES: tuple[float, ...] = tuple(sorted({round(1.25 ** power) for power in range(61)} | {60, 300, 900, 3600, 14400}))
"""Where a percentile is looked for: every edge of the reports' display buckets, and a step
of a quarter between 1 s and a week, so a rank's bucket holds a few percent of the values."""

NO_ROUTE = 0
"""The route key of a handoff straight to a channel."""

TIME_TO_PERSON, DURATION = 0, 1
"""The measures of `report_measures`."""

UNTIMED = -1
"""The fine bucket of `report_people` for handoffs handled without a time to a person (a
release alone)."""

HOUR, DAY = 3600, 86400

SHARDS = 16
"""On PostgreSQL each rollup key is kept in up to this many rows, a fact's shard taken from a
hash of its id: a trigger's upsert holds its row's lock until the transaction commits, so
without shards every handoff of one hour and channel would wait for the one before it (20
clients on two instances ran 25% slower). Readers sum the shards. SQLite writes one
transaction at a time anyway: one shard, 0."""


def fine_bucket_sql(value: str) -> str:
    """The index of the fine bucket a (non-NULL) `value` falls in, as SQL: 0 below the first
    edge, i from `FINE_EDGES[i-1]` up to `FINE_EDGES[i]`, len(FINE_EDGES) from the last on.
    A binary search as nested CASEs: log2(n) comparisons a row."""
    def search(low: int, high: int) -> str:
        if low == high:
            return str(low)
        middle = (low + high) // 2
        return f"CASE WHEN {value} < {FINE_EDGES[middle]!r} THEN {search(low, middle)} ELSE {search(middle + 1, high)} END"

    return search(0, len(FINE_EDGES))


@dataclass(frozen=True)
class Dialect:
    """What SQLite and PostgreSQL spell each their own way inside a rollup's SQL."""

    name: str
    distinct: str  # the NULL-safe "differs from", over {old} and {new} (PostgreSQL has no = for json: as text)
    missing_required: str  # whether a row's required fields were missing, over `{r}`
    shard: str  # the row's shard (`SHARDS`), over `{r}`

    def epoch_hour(self, at: str) -> str:
        if self.name == "sqlite":
            return f"(CAST(strftime('%s', {at}) AS INTEGER) / {HOUR})"
        return f"CAST(floor(extract(epoch from {at}) / {HOUR}) AS INTEGER)"

    def epoch_day(self, at: str) -> str:
        if self.name == "sqlite":
            return f"(CAST(strftime('%s', {at}) AS INTEGER) / {DAY})"
        return f"CAST(floor(extract(epoch from {at}) / {DAY}) AS INTEGER)"


SQLITE = Dialect("sqlite", "{old} IS NOT {new}", "{r}.missing_required != '[]'", "0")
POSTGRESQL = Dialect("postgresql", "{old}::text IS DISTINCT FROM {new}::text", "{r}.missing_required::text <> '[]'",
                     f"(get_byte(decode(md5({{r}}.id), 'hex'), 0) % {SHARDS})")


def dialect_named(name: str) -> Dialect:
    return SQLITE if name == "sqlite" else POSTGRESQL


@dataclass(frozen=True)
class Rollup:
    """One rollup fed from one table: its key columns and their expressions over a source
    row `{r}`, the counts each row adds, which rows count (`when`), the source columns it
    reads (an update of any of them moves the row's counts), and a text column that keeps
    the greatest value seen (a label)."""

    table: str
    source: str
    keys: tuple[tuple[str, str], ...]  # {r}: the row; {hour}, {day}: its creation's UTC hour, day
    counts: tuple[tuple[str, str], ...]
    reads: tuple[str, ...]
    when: str = "1 = 1"
    greatest: tuple[str, str] | None = None

    @property
    def _keys(self) -> tuple[tuple[str, str], ...]:
        """The key columns, the shard last."""
        return (*self.keys, ("shard", "{shard}"))

    def _columns(self) -> list[str]:
        return [*(name for name, _ in self._keys), *(name for name, _ in self.counts),
                *([self.greatest[0]] if self.greatest else [])]

    def _expressions(self, dialect: Dialect, row: str) -> tuple[list[str], list[str], str]:
        def over(expression: str) -> str:
            return expression.format(r=row, hour=dialect.epoch_hour(f"{row}.created_at"),
                                     day=dialect.epoch_day(f"{row}.created_at"),
                                     missing=dialect.missing_required.format(r=row), shard=dialect.shard.format(r=row))
        return ([over(e) for _, e in self._keys], [over(e) for _, e in self.counts], over(self.when))

    def upsert(self, dialect: Dialect, row: str, sign: int, condition: str | None = None) -> str:
        """The statement that adds (`sign` 1) or takes out (-1) trigger row `row`'s counts."""
        keys, counts, when = self._expressions(dialect, row)
        label = [self.greatest[1].format(r=row)] if self.greatest else []
        where = f"({when})" + (f" AND ({condition})" if condition else "")
        updates = [f"{name} = {self.table}.{name} + excluded.{name}" for name, _ in self.counts]
        if self.greatest:
            name = self.greatest[0]
            updates.append(f"{name} = CASE WHEN excluded.{name} > {self.table}.{name} THEN excluded.{name}"
                           f" ELSE {self.table}.{name} END")
        return (
            f"INSERT INTO {self.table} ({', '.join(self._columns())}) "
            f"SELECT {', '.join([*keys, *(f'{sign} * ({c})' for c in counts), *label])} WHERE {where} "
            f"ON CONFLICT ({', '.join(name for name, _ in self._keys)}) DO UPDATE SET {', '.join(updates)}"
        )

    def rebuild(self, dialect: Dialect) -> str:
        """The statement that counts every source row afresh (into an emptied table)."""
        keys, counts, when = self._expressions(dialect, "r")
        label = [f"max({self.greatest[1].format(r='r')})"] if self.greatest else []
        return (
            f"INSERT INTO {self.table} ({', '.join(self._columns())}) "
            f"SELECT {', '.join([*keys, *(f'sum({c})' for c in counts), *label])} "
            f"FROM {self.source} AS r WHERE {when} GROUP BY {', '.join(str(n) for n in range(1, len(keys) + 1))}"
        )

    def changed(self, dialect: Dialect) -> str:
        return " OR ".join(dialect.distinct.format(old=f"OLD.{column}", new=f"NEW.{column}") for column in self.reads)


_WHERE = ("channel_id", "{r}.channel_id"), ("route", f"coalesce({{r}}.route_id, {NO_ROUTE})")


def _measure(number: int, column: str) -> Rollup:
    return Rollup(
        "report_measures", "handoff_sessions",
        keys=(("day", "{day}"), *_WHERE, ("measure", str(number)),
              ("fine", fine_bucket_sql(f"{{r}}.{column}"))),
        counts=(("handoffs", "1"),), reads=("created_at", "channel_id", "route_id", column),
        when=f"{{r}}.{column} IS NOT NULL",
    )


def _people(table: str, through: tuple[tuple[str, str], ...]) -> Rollup:
    fine = f"CASE WHEN {{r}}.time_to_person_seconds IS NULL THEN {UNTIMED} ELSE {fine_bucket_sql('{r}.time_to_person_seconds')} END"
    return Rollup(
        table, "handoff_sessions", keys=(*through, ("day", "{day}"), ("person", "{r}.handled_by"), ("fine", fine)),
        counts=(("handoffs", "1"),),
        reads=("created_at", "handled_by", "time_to_person_seconds", *(("channel_id", "route_id") if through else ())),
        when="{r}.handled_by IS NOT NULL",
    )


ROLLUPS: tuple[Rollup, ...] = (
    Rollup("report_hours", "handoff_sessions", keys=(("hour", "{hour}"), *_WHERE),
           counts=(("handoffs", "1"),), reads=("created_at", "channel_id", "route_id", "channel_label"),
           greatest=("channel_label", "{r}.channel_label")),
    Rollup("report_endings", "handoff_sessions",
           keys=(("day", "{day}"), *_WHERE, ("ending", "coalesce({r}.release_reason, {r}.state)"),
                 ("outcome", "coalesce({r}.outcome, '')")),
           counts=(("handoffs", "1"), ("missing_required", "CASE WHEN {missing} THEN 1 ELSE 0 END")),
           reads=("created_at", "channel_id", "route_id", "state", "release_reason", "outcome", "missing_required")),
    _measure(TIME_TO_PERSON, "time_to_person_seconds"),
    _measure(DURATION, "duration_seconds"),
    _people("report_people", ()),
    _people("report_people_through", _WHERE),
    Rollup("report_conversations", "conversations", keys=(("day", "{day}"),),
           counts=(("conversations", "1"), ("escalated", "CASE WHEN {r}.first_handoff_at IS NULL THEN 0 ELSE 1 END")),
           reads=("created_at", "serves_handoff_session_id", "first_handoff_at"),
           when="{r}.serves_handoff_session_id IS NULL"),
)

ROLLUP_TABLES: tuple[str, ...] = tuple(dict.fromkeys(rollup.table for rollup in ROLLUPS))
SOURCES: tuple[str, ...] = tuple(dict.fromkeys(rollup.source for rollup in ROLLUPS))


def _of(source: str) -> list[Rollup]:
    return [rollup for rollup in ROLLUPS if rollup.source == source]


def _watched(source: str) -> list[str]:
    return list(dict.fromkeys(column for rollup in _of(source) for column in rollup.reads))


def create_triggers(dialect: Dialect) -> list[str]:
    """The DDL of the triggers that keep every rollup (after an insert, an update of a column
    a rollup reads, a delete)."""
    statements: list[str] = []
    for source in SOURCES:
        rollups, watched = _of(source), ", ".join(_watched(source))
        added = [rollup.upsert(dialect, "NEW", 1) for rollup in rollups]
        moved = [statement for rollup in rollups for statement in (
            rollup.upsert(dialect, "OLD", -1, rollup.changed(dialect)), rollup.upsert(dialect, "NEW", 1, rollup.changed(dialect)))]
        removed = [rollup.upsert(dialect, "OLD", -1) for rollup in rollups]
        if dialect.name == "sqlite":
            for event, body in (("INSERT", added), (f"UPDATE OF {watched}", moved), ("DELETE", removed)):
                name = f"report_rollups_{source}_{event.split()[0].lower()}"
                statements.append(f"CREATE TRIGGER {name} AFTER {event} ON {source} FOR EACH ROW BEGIN "
                                  + "".join(f"{s}; " for s in body) + "END")
        else:
            function = f"report_rollups_{source}"
            statements.append(
                f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF TG_OP = 'INSERT' THEN {''.join(f'{s}; ' for s in added)}"
                f"ELSIF TG_OP = 'UPDATE' THEN {''.join(f'{s}; ' for s in moved)}"
                f"ELSE {''.join(f'{s}; ' for s in removed)}END IF; RETURN NULL; END $$"
            )
            statements.append(f"CREATE TRIGGER {function} AFTER INSERT OR UPDATE OF {watched} OR DELETE ON {source}"
                              f" FOR EACH ROW EXECUTE FUNCTION {function}()")
    return statements


def drop_triggers(dialect: Dialect) -> list[str]:
    if dialect.name == "sqlite":
        return [f"DROP TRIGGER IF EXISTS report_rollups_{source}_{event}"
                for source in SOURCES for event in ("insert", "update", "delete")]
    return [statement for source in SOURCES for statement in (
        f"DROP TRIGGER IF EXISTS report_rollups_{source} ON {source}", f"DROP FUNCTION IF EXISTS report_rollups_{source}()")]


def rebuild_statements(dialect: Dialect) -> list[str]:
    """Empty every rollup and count the facts afresh. On PostgreSQL the facts' tables are
    locked against writers first (readers go on), so no write lands between the emptying
    and the counting, nor twice."""
    lock = [] if dialect.name == "sqlite" else [f"LOCK TABLE {', '.join(SOURCES)} IN SHARE MODE"]
    return [*lock, *(f"DELETE FROM {table}" for table in ROLLUP_TABLES), *(rollup.rebuild(dialect) for rollup in ROLLUPS)]


def run_sync(connection: Connection, statements: Iterable[str]) -> None:
    """Run the statements on a synchronous connection (a migration's)."""
    for statement in statements:
        connection.execute(text(statement))


async def rebuild(session: AsyncSession | AsyncConnection, dialect_name: str) -> None:
    """Count every rollup afresh from the facts, in the caller's transaction."""
    for statement in rebuild_statements(dialect_named(dialect_name)):
        await session.execute(text(statement))
