// One receipt as a picture: its fields, its error, its timeline (states, attempts, retries and
// webhook deliveries on one time axis), the transitions as a table, the deliveries with retry.

import { get, post } from "../api.js";
import { approvalControls, approvalSummary, awaitsApproval } from "../approval.js";
import { deliveryTable, retryNotice } from "../deliveries.js";
import { button, h, json, problemBox, show, span, statusBadge, when } from "../dom.js";
import { drawTimeline } from "../timeline.js";

const TERMINAL = ["success", "failed", "partially_succeeded", "canceled"];

/** The agent run that made this call, if one did. */
function runOf(receipt) {
  return (receipt.metadata && receipt.metadata.run_id) || null;
}

function facts(receipt) {
  const link = (href, text) => (text ? h("a", { href }, text) : "—");
  const took = receipt.finished_at ? span(Date.parse(receipt.finished_at) - Date.parse(receipt.created_at)) : "";
  const rows = [
    ["Tool", link("#/tools", receipt.tool), `kind ${receipt.kind}`],
    ["Trace", link(`#/receipts?trace_id=${encodeURIComponent(receipt.trace_id)}`, receipt.trace_id)],
    ["Call id", receipt.call_id || "—"],
    ["Parent", link(`#/receipts/${receipt.parent_id}`, receipt.parent_id)],
    ["Attempts", `${receipt.attempt} of at most ${receipt.max_attempts}`],
    ["Idempotency key", receipt.idempotency_key || "—"],
    ["Created", when(receipt.created_at)],
    ["Started", when(receipt.started_at) || "—"],
    ["Finished", when(receipt.finished_at) || "—", took && `after ${took}`],
    ["Deadline", when(receipt.deadline_at) || "—"],
  ];
  if (runOf(receipt)) {
    rows.splice(4, 0, ["Run", link(`#/runs/${runOf(receipt)}`, runOf(receipt)), `its step ${receipt.metadata.step}`]);
  }
  if (receipt.approval) rows.push(["Approval", approvalSummary(receipt.approval)]);
  if (receipt.metadata && Object.keys(receipt.metadata).length) rows.push(["Metadata", JSON.stringify(receipt.metadata)]);
  return h("dl", { class: "facts" }, rows.map(([name, value, note]) =>
    [h("dt", {}, name), h("dd", {}, value, note ? h("span", { class: "muted" }, ` ${note}`) : null)]));
}

function errorBox(error) {
  return h("div", { class: "receipt-error", "data-testid": "receipt-error" },
    h("strong", {}, error.code), `: ${error.message}`,
    error.retryable ? h("span", { class: "muted" }, " (retryable)") : null,
    error.details && Object.keys(error.details).length ? json(error.details) : null);
}

function eventTable(events) {
  return h("table", { class: "list events" },
    h("thead", {}, h("tr", {}, ["At", "Transition", "Attempt", "By", "Detail"].map((name) => h("th", {}, name)))),
    h("tbody", {}, events.map((event) => h("tr", {},
      h("td", {}, when(event.at)),
      h("td", {}, event.from_status ? `${event.from_status} → ` : "", statusBadge(event.to_status)),
      h("td", {}, event.attempt),
      h("td", {}, event.actor),
      h("td", {}, Object.keys(event.detail || {}).length ? h("code", {}, JSON.stringify(event.detail)) : "")))));
}

async function deliveriesOf(receiptId) {
  try {
    return { deliveries: (await get("/v1/deliveries", { receipt_id: receiptId, limit: 200 })).data };
  } catch (error) {
    if (error.status === 401) throw error;
    return { deliveries: [], problem: error }; // the receipt is still worth showing
  }
}

/** `notices.top` is shown under the buttons (a decision taken), `notices.deliveries` above the deliveries. */
export async function render(view, id, params, notices = {}) {
  show(view, h("h1", {}, "Receipt ", h("code", {}, id)), h("p", { class: "muted" }, "Loading…"));
  const [receipt, events, { deliveries, problem }] = await Promise.all([
    get(`/v1/receipts/${encodeURIComponent(id)}`),
    get(`/v1/receipts/${encodeURIComponent(id)}/events`).then((page) => page.data),
    deliveriesOf(id),
  ]);
  const again = (found = {}) => render(view, id, params, found);
  const actions = h("div", { class: "actions" });
  if (awaitsApproval(receipt)) {
    actions.append(approvalControls(receipt, (answer, verb, by) => again({ top: h("p", { class: "notice ok",
      "data-testid": "notice" }, `${verb === "approve" ? "Approved" : "Rejected"} by ${by}.`) })));
  }
  if (!TERMINAL.includes(receipt.status)) {
    const message = h("div", { class: "message" });
    actions.append(button("Cancel the call", { "data-action": "cancel", class: "danger" }, async () => {
      try {
        await post(`/v1/receipts/${receipt.id}/cancel`);
        await again();
      } catch (error) {
        show(message, problemBox(error));
      }
    }), message);
  }
  actions.append(button("Refresh", { "data-action": "refresh" }, () => again()));
  show(view,
    h("h1", {}, "Receipt ", h("code", {}, receipt.id), " ", statusBadge(receipt.status)),
    actions,
    notices.top,
    receipt.error ? errorBox(receipt.error) : null,
    facts(receipt),
    h("h2", {}, "Timeline"),
    h("div", { class: "timeline-box" }, drawTimeline(receipt, events, deliveries)),
    h("details", { class: "events-detail" }, h("summary", {}, `${events.length} transitions`), eventTable(events)),
    h("h2", {}, "Webhook deliveries"),
    notices.deliveries,
    problem ? problemBox(problem, "The deliveries of this receipt could not be read.") : null,
    deliveries.length
      ? deliveryTable(deliveries, (delivery) => again({ deliveries: retryNotice(delivery) }), { receiptColumn: false })
      : problem ? null : h("p", { class: "empty" }, "No webhook deliveries for this receipt."),
    h("div", { class: "io" },
      h("section", {}, h("h2", {}, "Input"), json(receipt.input)),
      h("section", {}, h("h2", {}, "Output"), receipt.output === null ? h("p", { class: "muted" }, "none") : json(receipt.output))));
}
