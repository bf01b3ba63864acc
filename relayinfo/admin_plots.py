"""The readiness page's plots, drawn on the server as inline SVG (no JavaScript, no CDN).

Three figures, each from what the relay already records:

- stamp-to-commit lag: the writers' samples (`writer_lag_samples`, kept two hours by
  artifacts.services.stamp_lag) binned on a log scale, against the overlap (the margin rounds
  allow for late commits);
- rounds over time: the fleet's per-minute round traffic (relaycore.metrics.round_traffic, in
  the shared cache): rounds finished, first rounds (a client with no token: cause `start`),
  resets by cause (retired, epoch, expired, not_ready, view: a client that had a token and must
  read everything again), pages served. First rounds are new clients; resets are the ones an
  operator looks into, so they are never drawn as one line with them;
- the fleet's timeline: each registered instance from its start to when it was last seen
  (`relay_instances`), the item-4 episodes (`fleet_episodes`) and the last sync-epoch move.

The SVG is a few dozen elements, written here because a chart library would bring JavaScript
for three static figures; every text goes through Django's escaping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from relaycore.metrics import MinuteTraffic
from relayinfo.models import FleetEpisode, RelayInstance, SyncState

WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40
# Bin edges of the lag histogram (milliseconds); the overlap is added as an edge of its own.
LAG_EDGES_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 15000, 60000)
SERIES_COLOURS = {"rounds": "#417690", "first": "#2e8540", "pages": "#999999"}
# One colour per reset cause (relaycore.metrics.RESET_CAUSES but "start", drawn as "first").
RESET_COLOURS = {"retired": "#ba2121", "epoch": "#e0a000", "expired": "#8e44ad",
                 "not_ready": "#d35400", "view": "#c2185b"}
TIMELINE_HOURS = 24
TIMELINE_INSTANCES = 12  # the most recently seen


@dataclass(frozen=True)
class LagBin:
    low_ms: float
    high_ms: float
    count: int


def _svg(label: str, body: Sequence[str], height: int = HEIGHT) -> SafeString:
    # Every text in `body` went through escape(); the rest is numbers formatted here.
    return mark_safe(
        f'<svg class="plot" role="img" aria-label="{escape(label)}" viewBox="0 0 {WIDTH} {height}"'
        f' width="100%" style="max-width:{WIDTH}px" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(label)}</title>{''.join(body)}</svg>"
    )


def _text(x: float, y: float, text: str, *, anchor: str = "middle", css: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="11"'
            f' fill="currentColor" {css}>{escape(text)}</text>')


def _ms(value: float) -> str:
    return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"


def lag_bins(*, overlap_ms: float, window_seconds: int = 3600) -> list[LagBin]:
    """The writers' samples of the window, counted per bin (the last bin: at or past the
    overlap). One aggregate query; the table holds at most two hours of samples."""
    edges = sorted({float(edge) for edge in (*LAG_EDGES_MS, overlap_ms)})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT width_bucket(lag_ms, %s::float8[]), count(*) FROM writer_lag_samples"
            " WHERE recorded_at >= now() - make_interval(secs => %s) GROUP BY 1",
            [edges, window_seconds],
        )
        counts = dict(cursor.fetchall())
    lows = [edges[0] / 10, *edges]
    highs = [*edges, edges[-1] * 2]
    return [
        LagBin(low, high, int(counts.get(i, 0)))
        for i, (low, high) in enumerate(zip(lows, highs, strict=True))
    ]


def lag_plot(bins: Sequence[LagBin], *, overlap_ms: float) -> SafeString:
    """Bars of the lag distribution on a log axis, with the overlap as a red line."""
    low, high = math.log10(bins[0].low_ms), math.log10(bins[-1].high_ms)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(ms: float) -> float:
        return LEFT + (math.log10(ms) - low) / (high - low) * plot_w

    peak = max((b.count for b in bins), default=0) or 1
    body = [f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"'
            ' stroke="currentColor" stroke-width="1"/>']
    for b in bins:
        bar_h = b.count / peak * plot_h
        bar_w = max(1.0, x(b.high_ms) - x(b.low_ms) - 2)
        body.append(
            f'<rect class="lag-bin" data-count="{b.count}" x="{x(b.low_ms) + 1:.1f}"'
            f' y="{TOP + plot_h - bar_h:.1f}" width="{bar_w:.1f}"'
            f' height="{bar_h:.1f}" fill="#417690"><title>{escape(_ms(b.low_ms))} to'
            f" {escape(_ms(b.high_ms))}: {b.count} writes</title></rect>"
        )
    for edge in (1, 10, 100, 1000, 10000, 100000):
        if bins[0].low_ms <= edge <= bins[-1].high_ms:
            body.append(_text(x(edge), TOP + plot_h + 14, _ms(edge)))
    body.append(
        f'<line class="overlap" x1="{x(overlap_ms):.1f}" y1="{TOP}" x2="{x(overlap_ms):.1f}"'
        f' y2="{TOP + plot_h}" stroke="#ba2121" stroke-width="2" stroke-dasharray="4 3"/>'
    )
    body.append(_text(x(overlap_ms) - 4, TOP + 10, f"overlap {_ms(overlap_ms)}", anchor="end",
                      css='fill="#ba2121"'))
    body.append(_text(LEFT - 6, TOP + 10, str(max(b.count for b in bins)), anchor="end"))
    body.append(_text(LEFT + plot_w / 2, HEIGHT - 6, "stamp-to-commit lag per write (log scale)"))
    return _svg("Stamp-to-commit lag distribution against the overlap", body)


def traffic_plot(minutes: Sequence[MinuteTraffic]) -> SafeString:
    """Per-minute lines: rounds finished, first rounds, pages served, and one line per reset
    cause seen in the window (the legend names every cause with its total)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    series: list[tuple[str, str, str, list[int]]] = [
        ("rounds", "rounds finished", SERIES_COLOURS["rounds"], [m.rounds for m in minutes]),
        ("first", "first rounds", SERIES_COLOURS["first"], [m.caused("start") for m in minutes]),
        ("pages", "pages", SERIES_COLOURS["pages"], [m.pages for m in minutes]),
    ]
    for cause, colour in RESET_COLOURS.items():
        counts = [m.caused(cause) for m in minutes]
        if any(counts):
            series.append((f"reset-{cause}", f"resets: {cause}", colour, counts))
    peak = max((max(values, default=0) for *_, values in series), default=0) or 1
    step = plot_w / max(1, len(minutes) - 1)
    body = [f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"'
            ' stroke="currentColor" stroke-width="1"/>']
    for name, _label, colour, values in series:
        points = " ".join(
            f"{LEFT + i * step:.1f},{TOP + plot_h - value / peak * plot_h:.1f}"
            for i, value in enumerate(values)
        )
        body.append(f'<polyline class="series-{name}" data-total="{sum(values)}"'
                    f' points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
    legend = [(label, colour, sum(values)) for _name, label, colour, values in series]
    if len(series) == 3:
        legend.append(("no resets", RESET_COLOURS["retired"], 0))
    for i, (label, colour, total) in enumerate(legend):
        lx, ly = LEFT + 10 + (i % 4) * 170, TOP + (i // 4) * 14
        body.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(lx + 14, ly + 9, f"{label} ({total})", anchor="start"))
    if minutes:
        body.append(_text(LEFT, TOP + plot_h + 14, minutes[0].start.strftime("%H:%M UTC")))
        body.append(_text(LEFT + plot_w, TOP + plot_h + 14, minutes[-1].start.strftime("%H:%M UTC"),
                          anchor="end"))
    body.append(_text(LEFT - 6, TOP + 10, str(peak), anchor="end"))
    body.append(_text(LEFT + plot_w / 2, HEIGHT - 6, "per minute, whole fleet"))
    return _svg("Rounds, first rounds, resets by cause and pages per minute", body)


def fleet_timeline(*, refresh_seconds: float) -> SafeString:
    """The fleet (up to the last day): one bar per instance, episodes in red, the epoch's last
    move."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        row = cursor.fetchone()
    assert row is not None
    now: datetime = row[0]
    horizon = now - timedelta(hours=TIMELINE_HOURS)
    instances = list(RelayInstance.objects.filter(last_seen_at__gte=horizon)
                     .order_by("-last_seen_at")[:TIMELINE_INSTANCES])
    # Episodes still open, or closed within the window.
    episodes = list(
        FleetEpisode.objects.filter(Q(closed_at__isnull=True) | Q(closed_at__gte=horizon))
        .order_by("-id")[:50]
    )
    # The window: back to the earliest start shown (at least an hour, at most a day), so a
    # fleet that started minutes ago is not a sliver at the right edge.
    earliest = min([i.started_at for i in instances] + [e.opened_at for e in episodes],
                   default=now)
    start = max(horizon, min(earliest, now - timedelta(hours=1)))
    state = SyncState.objects.filter(pk=1).first()
    row_h = 18
    height = TOP + max(1, len(instances)) * row_h + BOTTOM + 10
    plot_w = WIDTH - 150 - RIGHT
    span = (now - start).total_seconds()

    def x(moment: datetime) -> float:
        clipped = min(max(moment, start), now)
        return 150 + (clipped - start).total_seconds() / span * plot_w

    bottom = height - BOTTOM
    body = []
    for episode in episodes:
        end = episode.closed_at or now
        body.append(f'<rect class="episode" x="{x(episode.opened_at):.1f}" y="{TOP - 4}"'
                    f' width="{max(2.0, x(end) - x(episode.opened_at)):.1f}"'
                    f' height="{bottom - TOP + 4}" fill="#ba2121" opacity="0.2">'
                    f"<title>episode {episode.pk}: {escape(episode.reason)}</title></rect>")
    stale_after = timedelta(seconds=3 * refresh_seconds)
    for i, instance in enumerate(instances):
        y = TOP + i * row_h
        live = now - instance.last_seen_at <= stale_after
        colour = "#417690" if instance.stamps and not instance.key_generated else "#ba2121"
        body.append(_text(144, y + 12, f"{instance.hostname}:{instance.pid}", anchor="end"))
        body.append(
            f'<rect class="instance{" live" if live else ""}" data-pid="{instance.pid}"'
            f' x="{x(instance.started_at):.1f}" y="{y + 2}"'
            f' width="{max(2.0, x(instance.last_seen_at) - x(instance.started_at)):.1f}"'
            f' height="{row_h - 6}" fill="{colour}" opacity="{1 if live else 0.45}">'
            f"<title>{escape(str(instance))}, stamps {'yes' if instance.stamps else 'no'},"
            f" key {escape(instance.key_id)}</title></rect>"
        )
    if not instances:
        body.append(_text(150 + plot_w / 2, TOP + 12, "no instance seen in the last day"))
    if state is not None and state.bumped_at >= start:
        bx = x(state.bumped_at)
        body.append(f'<line class="epoch" x1="{bx:.1f}" y1="{TOP - 4}" x2="{bx:.1f}" y2="{bottom}"'
                    ' stroke="#e0a000" stroke-width="2"/>')
        body.append(_text(bx, bottom + 26, f"epoch {state.epoch}: {state.reason[:40]}"))
    body.append(f'<line x1="150" y1="{bottom}" x2="{150 + plot_w}" y2="{bottom}"'
                ' stroke="currentColor" stroke-width="1"/>')
    for tick in range(5):
        moment = start + (now - start) * tick / 4
        body.append(_text(x(moment), bottom + 13, moment.strftime("%H:%M UTC")))
    return _svg("The fleet: instances, episodes, sync epoch", body, height)

