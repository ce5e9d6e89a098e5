// Agent runs: the list (GET /v1/runs, without steps), and one run with its steps in order: model
// turns (the assistant message, its tool calls, tokens, latency) and tool steps (each call with its
// receipt, its status and the tool message the model got back, or why it was refused).

import { get } from "../api.js";
import { awaitsApproval } from "../approval.js";
import { button, h, json, show, span, statusBadge, when } from "../dom.js";

const STATUSES = [["", "All"], ["running", "Running"], ["waiting", "Waiting"], ["success", "Succeeded"],
  ["failed", "Failed"], ["canceled", "Canceled"]];
const TERMINAL = ["success", "failed", "canceled"];
const RECEIPT_PAGES = 5; // pages of the run's trace read to show its calls' states (200 receipts each)

function hashFor(params) {
  const query = new URLSearchParams([...params].filter(([, value]) => value));
  return `#/runs${query.size ? `?${query}` : ""}`;
}

function traceLink(traceId) {
  return h("a", { href: `#/receipts?trace_id=${encodeURIComponent(traceId)}`, class: "trace" }, traceId);
}

function quickFilters(params) {
  const current = params.get("status") || "";
  return h("nav", { class: "quick", "aria-label": "Runs by status" }, STATUSES.map(([status, label]) => {
    const next = new URLSearchParams(params);
    next.delete("cursor");
    next.set("status", status);
    return h("a", { href: hashFor(next), class: status === current ? "active" : null, "data-quick": status || "all" },
      label);
  }));
}

function outcome(run) {
  if (run.error) return h("span", { class: "error-code" }, run.error.code);
  if (run.output) return h("span", { class: "clip" }, run.output);
  return run.status === "waiting" ? h("span", { class: "muted" }, "waiting for a person's decision") : "";
}

function runRow(run) {
  const took = run.finished_at ? Date.parse(run.finished_at) - Date.parse(run.created_at) : null;
  const row = h("tr", { "data-run-id": run.id, "data-status": run.status, class: `clickable row-${run.status}`, tabindex: 0 },
    h("td", {}, h("a", { href: `#/runs/${run.id}` }, run.id)),
    h("td", {}, run.model),
    h("td", {}, statusBadge(run.status)),
    h("td", {}, outcome(run)),
    h("td", {}, `${run.iterations}/${run.max_iterations}`),
    h("td", { class: "nowrap" }, when(run.created_at)),
    h("td", { class: "nowrap" }, span(took)),
    h("td", {}, traceLink(run.trace_id)));
  const open = () => { location.hash = `#/runs/${run.id}`; };
  row.addEventListener("click", (event) => { if (!event.target.closest("a")) open(); });
  row.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
  return row;
}

export async function renderList(view, params) {
  const results = h("div", { class: "results" }, h("p", { class: "muted" }, "Loading…"));
  show(view, h("h1", {}, "Runs"), quickFilters(params), results);
  const page = await get("/v1/runs", { status: params.get("status"), trace_id: params.get("trace_id"),
    cursor: params.get("cursor") });
  const next = new URLSearchParams(params);
  next.set("cursor", page.next_cursor || "");
  show(results,
    page.data.length
      ? h("table", { class: "list", "data-testid": "runs" },
        h("thead", {}, h("tr", {}, ["Run", "Model", "Status", "Outcome", "Model calls", "Created", "Took", "Trace"]
          .map((name) => h("th", {}, name)))),
        h("tbody", {}, page.data.map(runRow)))
      : h("p", { class: "empty", "data-testid": "runs-empty" },
        params.get("status") ? "No runs with this status." : "No runs yet: POST /v1/runs starts one."),
    page.next_cursor ? h("p", { class: "paging" }, h("a", { href: hashFor(next) }, "Next page »")) : null);
}

/** The receipts of a run's tool calls, by id, read from its trace (the calls share the run's trace_id). */
async function receiptsOf(run) {
  const wanted = new Set((run.steps || []).flatMap((step) => step.receipts || []));
  const found = new Map();
  let cursor = null;
  for (let pages = 0; wanted.size > found.size && pages < RECEIPT_PAGES; pages += 1) {
    const page = await get("/v1/receipts", { trace_id: run.trace_id, limit: 200, cursor });
    for (const receipt of page.data) if (wanted.has(receipt.id)) found.set(receipt.id, receipt);
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  return found;
}

function callName(call) {
  return call.function ? call.function.name : call.name;
}

function modelStep(step) {
  const message = step.response || {};
  const calls = (message.tool_calls || []).map((call) => h("li", { "data-call-id": call.id },
    h("code", {}, callName(call)), " ",
    h("code", { class: "clip" }, call.function ? call.function.arguments : JSON.stringify(call.input)),
    h("span", { class: "muted" }, ` ${call.id}`)));
  const usage = step.usage ? `, ${step.usage.prompt_tokens} + ${step.usage.completion_tokens} tokens` : "";
  return [
    h("p", { class: "muted" }, `${step.request_messages} message${step.request_messages === 1 ? "" : "s"} sent, answered in ${span(step.latency_ms)}${usage}`),
    message.content ? h("blockquote", {}, typeof message.content === "string" ? message.content
      : JSON.stringify(message.content)) : null,
    calls.length ? h("div", {}, `It called ${calls.length === 1 ? "a tool" : `${calls.length} tools`}:`,
      h("ul", { class: "calls" }, calls)) : null,
  ];
}

function toolStep(step, asked, receipts) {
  const byCall = new Map();
  for (const id of step.receipts || []) {
    const receipt = receipts.get(id);
    if (receipt && receipt.call_id) byCall.set(receipt.call_id, receipt);
  }
  const told = new Map((step.messages || []).map((message) => [message.tool_call_id, message.content]));
  const listed = new Set();
  const rows = (step.order || []).map((callId) => {
    const receipt = byCall.get(callId);
    if (receipt) listed.add(receipt.id);
    const refused = (step.refused || {})[callId];
    const answer = told.get(callId) ?? (refused && refused.content);
    return h("tr", { "data-call-id": callId },
      h("td", {}, h("code", {}, asked.get(callId) || (receipt && receipt.tool) || "?")),
      h("td", {}, receipt
        ? h("a", { href: `#/receipts/${receipt.id}`, "data-receipt-link": receipt.id }, receipt.id)
        : refused ? h("span", { class: "error-code" }, "refused: not offered") : h("span", { class: "muted" }, "—")),
      h("td", {}, receipt ? statusBadge(receipt.status) : null,
        receipt && awaitsApproval(receipt)
          ? [" ", h("a", { href: "#/approvals", "data-testid": "to-approvals" }, "approve or reject »")] : null),
      h("td", {}, answer !== undefined ? h("code", { class: "clip", title: answer }, answer)
        : h("span", { class: "muted" }, "not answered yet")));
  });
  // Receipts not matched to a call above (not read from the trace, or without a call id): still linked.
  const others = (step.receipts || []).filter((id) => !listed.has(id));
  return [
    h("table", { class: "list calls" },
      h("thead", {}, h("tr", {}, ["Tool", "Receipt", "Status", "The model is told"].map((name) => h("th", {}, name)))),
      h("tbody", {}, rows)),
    others.length ? h("ul", { class: "step-receipts" }, others.map((id) =>
      h("li", {}, h("a", { href: `#/receipts/${id}`, "data-receipt-link": id }, id)))) : null,
    step.messages ? h("details", {}, h("summary", {}, `${step.messages.length} tool messages`), json(step.messages))
      : h("p", { class: "muted" }, "Its calls have not all ended: the run goes on once they do."),
  ];
}

function waitingNotice(run, receipts) {
  const asking = [...receipts.values()].filter(awaitsApproval);
  return h("div", { class: "notice waiting", "data-testid": "run-waiting" },
    h("strong", {}, "Waiting for a person. "),
    asking.length
      ? [`${asking.length === 1 ? "A call needs" : `${asking.length} calls need`} approval: `,
        asking.map((receipt, i) => [i ? ", " : "", h("a", { href: `#/receipts/${receipt.id}` }, receipt.tool)]),
        ". ", h("a", { href: "#/approvals", "data-testid": "to-approvals" }, "Open the approvals »")]
      : "Its tool calls wait for a decision or a client's result.",
    " The run goes on when they are decided (a rejection becomes a message the model reads).");
}

export async function renderOne(view, id, params) {
  show(view, h("h1", {}, "Run ", h("code", {}, id)), h("p", { class: "muted" }, "Loading…"));
  const run = await get(`/v1/runs/${encodeURIComponent(id)}`);
  const receipts = await receiptsOf(run);
  const steps = run.steps || [];
  const asked = new Map(steps.filter((step) => step.kind === "model")
    .flatMap((step) => ((step.response || {}).tool_calls || []).map((call) => [call.id, callName(call)])));
  show(view, h("h1", {}, "Run ", h("code", {}, run.id), " ", statusBadge(run.status)),
    h("div", { class: "actions" }, button("Refresh", { "data-action": "refresh" }, () => renderOne(view, id, params))),
    run.status === "waiting" ? waitingNotice(run, receipts) : null,
    run.error ? h("div", { class: "receipt-error", "data-testid": "run-error" },
      h("strong", {}, run.error.code), `: ${run.error.message}`) : null,
    h("dl", { class: "facts" },
      h("dt", {}, "Model"), h("dd", {}, run.model),
      h("dt", {}, "Tools offered"), h("dd", {}, (run.tools || []).length
        ? run.tools.map((name, i) => [i ? ", " : "", h("code", {}, name)]) : "none"),
      h("dt", {}, "Trace"), h("dd", {}, traceLink(run.trace_id)),
      h("dt", {}, "Model calls"), h("dd", {}, `${run.iterations} of at most ${run.max_iterations}`),
      h("dt", {}, "Tokens"), h("dd", {}, `${run.usage.prompt_tokens} prompt + ${run.usage.completion_tokens} completion`),
      h("dt", {}, "Created"), h("dd", {}, when(run.created_at)),
      h("dt", {}, "Finished"), h("dd", {}, when(run.finished_at) || "—",
        run.finished_at ? h("span", { class: "muted" },
          ` after ${span(Date.parse(run.finished_at) - Date.parse(run.created_at))}`) : null),
      TERMINAL.includes(run.status) ? null : [h("dt", {}, "Deadline"), h("dd", {}, when(run.deadline_at))],
      run.metadata && Object.keys(run.metadata).length
        ? [h("dt", {}, "Metadata"), h("dd", {}, h("code", {}, JSON.stringify(run.metadata)))] : null),
    run.output !== null && run.output !== undefined
      ? [h("h2", {}, "Answer"), h("blockquote", { class: "answer", "data-testid": "answer" }, run.output)] : null,
    h("h2", {}, `Steps (${steps.length})`),
    steps.length
      ? h("ol", { class: "steps", "data-testid": "steps" }, steps.map((step) =>
        h("li", { "data-step": step.index, "data-kind": step.kind, class: `step step-${step.kind}` },
          h("strong", {}, step.kind === "model" ? "Model turn" : "Tool calls"),
          step.kind === "model" ? modelStep(step) : toolStep(step, asked, receipts))))
      : h("p", { class: "empty" }, "No step yet: the run has not called its model."));
}
