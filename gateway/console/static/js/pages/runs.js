// Agent runs: the list, and one run with its steps (model turns, and tool steps with their receipts).

import { get } from "../api.js";
import { h, json, problemBox, show, span, statusBadge, when } from "../dom.js";

const NOT_OFFERED = "This server does not offer agent runs (GET /v1/runs answered 404).";

function notOffered(view, title, error) {
  if (error.status !== 404) throw error;
  show(view, h("h1", {}, title), problemBox(error, NOT_OFFERED));
}

export async function renderList(view, params) {
  show(view, h("h1", {}, "Runs"), h("p", { class: "muted" }, "Loading…"));
  let page;
  try {
    page = await get("/v1/runs", { status: params.get("status"), trace_id: params.get("trace_id"),
      cursor: params.get("cursor") });
  } catch (error) {
    notOffered(view, "Runs", error);
    return;
  }
  const next = new URLSearchParams(params);
  next.set("cursor", page.next_cursor || "");
  show(view, h("h1", {}, "Runs"),
    page.data.length
      ? h("table", { class: "list", "data-testid": "runs" },
        h("thead", {}, h("tr", {}, ["Run", "Model", "Status", "Iterations", "Created", "Trace"]
          .map((name) => h("th", {}, name)))),
        h("tbody", {}, page.data.map((run) => h("tr", { "data-run-id": run.id },
          h("td", {}, h("a", { href: `#/runs/${run.id}` }, run.id)),
          h("td", {}, run.model),
          h("td", {}, statusBadge(run.status)),
          h("td", {}, run.iterations ?? ""),
          h("td", {}, when(run.created_at)),
          h("td", {}, h("a", { href: `#/receipts?trace_id=${encodeURIComponent(run.trace_id)}` }, run.trace_id))))))
      : h("p", { class: "empty", "data-testid": "runs-empty" }, "No runs yet."),
    page.next_cursor ? h("p", { class: "paging" }, h("a", { href: `#/runs?${next}` }, "Next page »")) : null);
}

function modelStep(step) {
  const message = step.response || {};
  const calls = (message.tool_calls || []).map((call) => h("li", {},
    h("code", {}, call.function ? call.function.name : call.name), " ",
    h("code", { class: "clip" }, call.function ? call.function.arguments : JSON.stringify(call.input))));
  return [
    h("p", { class: "muted" }, `${step.request_messages} messages in, ${span(step.latency_ms)}`,
      step.usage ? `, ${step.usage.prompt_tokens} + ${step.usage.completion_tokens} tokens` : ""),
    message.content ? h("blockquote", {}, message.content) : null,
    calls.length ? h("div", {}, "Tool calls:", h("ul", {}, calls)) : null,
  ];
}

function toolStep(step) {
  return [
    h("ul", { class: "step-receipts" }, (step.receipts || []).map((id) =>
      h("li", {}, h("a", { href: `#/receipts/${id}`, "data-receipt-link": id }, id)))),
    h("details", {}, h("summary", {}, `${(step.messages || []).length} tool messages`), json(step.messages)),
  ];
}

export async function renderOne(view, id) {
  show(view, h("h1", {}, "Run ", h("code", {}, id)), h("p", { class: "muted" }, "Loading…"));
  let run;
  try {
    run = await get(`/v1/runs/${encodeURIComponent(id)}`);
  } catch (error) {
    notOffered(view, `Run ${id}`, error);
    return;
  }
  show(view, h("h1", {}, "Run ", h("code", {}, run.id), " ", statusBadge(run.status)),
    run.error ? h("div", { class: "receipt-error" }, h("strong", {}, run.error.code), `: ${run.error.message}`) : null,
    h("dl", { class: "facts" },
      h("dt", {}, "Model"), h("dd", {}, run.model),
      h("dt", {}, "Trace"), h("dd", {}, h("a", { href: `#/receipts?trace_id=${encodeURIComponent(run.trace_id)}` },
        run.trace_id)),
      h("dt", {}, "Iterations"), h("dd", {}, run.iterations ?? ""),
      h("dt", {}, "Usage"), h("dd", {}, run.usage ? `${run.usage.prompt_tokens} prompt + ${run.usage.completion_tokens} completion tokens` : ""),
      h("dt", {}, "Created"), h("dd", {}, when(run.created_at)),
      h("dt", {}, "Finished"), h("dd", {}, when(run.finished_at) || "—")),
    run.output ? [h("h2", {}, "Answer"), h("blockquote", { class: "answer" }, run.output)] : null,
    h("h2", {}, "Steps"),
    h("ol", { class: "steps", "data-testid": "steps" }, (run.steps || []).map((step) =>
      h("li", { "data-step": step.index, "data-kind": step.kind, class: `step step-${step.kind}` },
        h("strong", {}, step.kind === "model" ? "Model turn" : "Tool calls"),
        step.kind === "model" ? modelStep(step) : toolStep(step)))));
}
