// One receipt's life drawn on a time axis (SVG): the states it was in, each attempt (and the backoff
// before a retry), and every webhook delivery of the receipt with its attempts, all on the same scale.
//
// Hooks for tests and users: the <svg> is [data-testid=timeline]; each transition is one
// <g data-event="<to_status>" data-actor="<who>">, and a person's approval decision is also
// [data-decision=approved|rejected|expired] with "approved by <by>" as its label; attempts are
// [data-attempt=n]; delivery attempts [data-delivery-attempt].

import { s, span, when } from "./dom.js";

const WIDTH = 960;
const LEFT = 120; // lane labels
const RIGHT = 24;
const LANE = 34;
const TOP = 40; // room for two rows of state labels
const AXIS = 34;
const LABEL_GAP = 70; // a state label needs this much room in its row; without it, the tooltip has it
const LABEL_PAD = 6; // between two labels of a row
const CHAR_W = 6.6; // about one character of an 11 px label

const ms = (iso) => Date.parse(iso);

/** The attempts of a receipt from its events: [{attempt, start, end, outcome, retryIn}]. */
export function attemptsOf(events) {
  const attempts = [];
  events.forEach((event, index) => {
    if (event.to_status !== "running") return;
    const after = events[index + 1];
    attempts.push({ attempt: event.attempt, start: ms(event.at), end: after ? ms(after.at) : null,
      outcome: after ? (after.to_status === "pending" ? "retry" : after.to_status) : "running",
      retryIn: after && after.detail ? after.detail.retry_in_s : undefined,
      error: after && after.detail && after.detail.error ? after.detail.error : null });
  });
  return attempts;
}

/** A person's decision an event records (the move out of waiting for an approval), or null. */
export function decisionOf(event) {
  const approval = event.detail && event.detail.approval;
  if (event.from_status !== "waiting" || !approval || approval.state === "requested") return null;
  return approval;
}

function niceStep(range) {
  const rough = range / 6;
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= rough) || power * 10;
}

function hitLabel(x, y, text) {
  const nearEnd = x > WIDTH - RIGHT - 80; // keep it inside the picture
  return s("text", { x: nearEnd ? x - 4 : x + 6, y, class: "hit-label", "text-anchor": nearEnd ? "end" : "start" }, text);
}

function title(text) {
  return s("title", {}, text);
}

/** The timeline's <svg>. `now` (ms) closes the last state of a receipt that has not finished. */
export function drawTimeline(receipt, events, deliveries, now = Date.now()) {
  const attempts = attemptsOf(events);
  deliveries = [...deliveries].sort((a, b) => ms(a.created_at) - ms(b.created_at));
  const times = [ms(receipt.created_at), ...events.map((e) => ms(e.at))];
  for (const delivery of deliveries) {
    times.push(ms(delivery.created_at), ...delivery.attempts.map((a) => ms(a.at) + (a.latency_ms || 0)));
  }
  const terminal = ["success", "failed", "partially_succeeded", "canceled"].includes(receipt.status);
  if (!terminal) times.push(now);
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, t0 + 1);
  const x = (t) => LEFT + ((t - t0) / (t1 - t0)) * (WIDTH - LEFT - RIGHT);
  const lanes = ["states", "attempts", ...deliveries.map((d) => d.event_type)];
  const height = TOP + lanes.length * LANE + AXIS;
  const laneY = (index) => TOP + index * LANE;

  const svg = s("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "timeline", "data-testid": "timeline",
    role: "img", "aria-label": `timeline of ${receipt.id}: ${events.length} transitions` });
  lanes.forEach((name, index) => {
    svg.append(s("rect", { x: 0, y: laneY(index), width: WIDTH, height: LANE, class: `lane lane-${index % 2}` }),
      s("text", { x: 8, y: laneY(index) + LANE / 2 + 4, class: "lane-label" }, index > 1 ? `webhook ${name}` : name));
  });

  // States: a bar from each transition to the next, then the markers, one per transition.
  events.forEach((event, index) => {
    const start = ms(event.at);
    const end = index + 1 < events.length ? ms(events[index + 1].at) : terminal ? start : now;
    if (end > start) {
      svg.append(s("rect", { x: x(start), y: laneY(0) + 9, width: Math.max(1, x(end) - x(start)), height: LANE - 18,
        class: `seg seg-${event.to_status}` }, title(`${event.to_status} for ${span(end - start)}`)));
    }
  });
  // Each row of state labels remembers where its last label ends; a label goes in the first row
  // with room for it, or only in its marker's tooltip.
  const labelRows = [-Infinity, -Infinity];
  events.forEach((event) => {
    const cx = x(ms(event.at));
    const decision = decisionOf(event);
    const label = decision ? `${decision.state}${decision.by ? ` by ${decision.by}` : ""}` : event.to_status;
    const half = Math.max(LABEL_GAP / 2, label.length * CHAR_W / 2);
    const lx = Math.min(Math.max(cx, half + 2), WIDTH - half - 2); // kept inside the picture
    const row = labelRows.findIndex((end) => lx - half >= end + LABEL_PAD);
    if (row >= 0) labelRows[row] = lx + half;
    const error = event.detail && event.detail.error ? `\n${event.detail.error.code}: ${event.detail.error.message}` : "";
    const note = decision && (decision.comment || decision.reason) ? `\n${decision.comment || decision.reason}` : "";
    svg.append(s("g", { "data-event": event.to_status, "data-from": event.from_status || "", "data-actor": event.actor,
      "data-decision": decision ? decision.state : null, class: decision ? "event decision" : "event" },
      title(`${event.from_status || "∅"} → ${event.to_status}, attempt ${event.attempt}, by ${event.actor}\n` +
        `${when(event.at)} (+${span(ms(event.at) - t0)})${decision ? `\n${label}` : ""}${note}${error}`),
      s("line", { x1: cx, x2: cx, y1: TOP - 4, y2: height - AXIS, class: "event-line" }),
      decision ? s("rect", { x: cx - 6, y: laneY(0) + LANE / 2 - 6, width: 12, height: 12,
        transform: `rotate(45 ${cx} ${laneY(0) + LANE / 2})`, class: `dot dot-${event.to_status} decision-${decision.state}` })
        : s("circle", { cx, cy: laneY(0) + LANE / 2, r: 6, class: `dot dot-${event.to_status}` }),
      row >= 0 ? s("text", { x: lx, y: TOP - 8 - 14 * row, class: "event-label", "text-anchor": "middle" },
        label) : null));
  });

  // Attempts: how long each ran and how it ended; the backoff before a retry as a dashed line.
  attempts.forEach((attempt, index) => {
    const end = attempt.end ?? now;
    const y = laneY(1) + 8;
    const text = attempt.outcome === "retry" && attempt.retryIn !== undefined
      ? `#${attempt.attempt} retry in ${span(attempt.retryIn * 1000)}` : `#${attempt.attempt} ${attempt.outcome}`;
    svg.append(s("g", { "data-attempt": attempt.attempt, "data-outcome": attempt.outcome, class: "attempt" },
      title(`attempt ${attempt.attempt}: ${attempt.outcome} after ${span(end - attempt.start)}` +
        (attempt.error ? `\n${attempt.error.code}: ${attempt.error.message}` : "")),
      s("rect", { x: x(attempt.start), y, width: Math.max(3, x(end) - x(attempt.start)), height: LANE - 16,
        class: `bar bar-${attempt.outcome}` }),
      s("text", { x: x(attempt.start) + 4, y: y + LANE - 20, class: "bar-label" }, text)));
    const next = attempts[index + 1];
    if (attempt.outcome === "retry" && next && attempt.end !== null) {
      svg.append(s("line", { x1: x(attempt.end), x2: x(next.start), y1: y + (LANE - 16) / 2, y2: y + (LANE - 16) / 2,
        class: "backoff" }, title(`backoff ${span(next.start - attempt.end)}`)));
    }
  });

  // Webhook deliveries: queued at created_at, then each attempt as wide as its latency.
  deliveries.forEach((delivery, index) => {
    const y = laneY(index + 2) + LANE / 2;
    const queued = x(ms(delivery.created_at));
    const group = s("g", { "data-delivery": delivery.id, class: `delivery delivery-${delivery.status}` },
      title(`${delivery.event_type} ${delivery.id}: ${delivery.status}, ${delivery.attempt_count} attempt(s)`),
      s("circle", { cx: queued, cy: y, r: 4, class: "queued" }));
    if (delivery.attempts.length) {
      group.append(s("line", { x1: queued, x2: x(ms(delivery.attempts[0].at)), y1: y, y2: y, class: "waiting" }));
    }
    for (const attempt of delivery.attempts) {
      const start = x(ms(attempt.at));
      const code = attempt.status_code ?? attempt.error ?? "no answer";
      group.append(s("g", { "data-delivery-attempt": attempt.id, class: attempt.success ? "ok" : "ko" },
        title(`${when(attempt.at)}: ${code}, ${span(attempt.latency_ms)}`),
        s("rect", { x: start, y: y - 7, width: Math.max(4, x(ms(attempt.at) + (attempt.latency_ms || 0)) - start),
          height: 14, class: "hit" }),
        hitLabel(start, y - 10, `${attempt.status_code ?? "✕"} · ${span(attempt.latency_ms)}`)));
    }
    svg.append(group);
  });

  // The axis: time since the first instant shown.
  const axisY = height - AXIS + 4;
  svg.append(s("line", { x1: LEFT, x2: WIDTH - RIGHT, y1: axisY, y2: axisY, class: "axis" }));
  const step = niceStep(t1 - t0);
  for (let offset = 0; t0 + offset <= t1; offset += step) {
    const tx = x(t0 + offset);
    svg.append(s("line", { x1: tx, x2: tx, y1: axisY, y2: axisY + 5, class: "axis" }),
      s("text", { x: tx, y: axisY + 18, class: "tick", "text-anchor": "middle" }, offset ? `+${span(offset)}` : "0"));
  }
  svg.append(s("text", { x: 8, y: axisY + 18, class: "tick" }, when(new Date(t0).toISOString()).slice(11)));
  return svg;
}
