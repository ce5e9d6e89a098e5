// The catalogue: every tool this key may call, with its contract and its arguments' JSON Schema.

import { get } from "../api.js";
import { h, json, show } from "../dom.js";

function contract(tool) {
  const approval = tool.requires_approval ? ", each call approved by a person first" : "";
  if (tool.effect === "read") return `read${approval}`;
  return (tool.idempotent ? "write, idempotent" : "write, not idempotent (never retried)") + approval;
}

export async function render(view) {
  show(view, h("h1", {}, "Catalogue"), h("p", { class: "muted" }, "Loading…"));
  const tools = (await get("/v1/tools")).data;
  show(view, h("h1", {}, "Catalogue"),
    h("p", { class: "muted" }, `${tools.length} tools. Workers publish theirs when they start; `,
      "function and api_call tools are defined over the API."),
    h("table", { class: "list", "data-testid": "tools" },
      h("thead", {}, h("tr", {}, ["Name", "Kind", "Effect", "Idempotent", "Timeout", "Attempts", "Description", "Schema"]
        .map((name) => h("th", {}, name)))),
      h("tbody", {}, tools.map((tool) => h("tr", { "data-tool": tool.name, title: contract(tool) },
        h("td", {}, h("code", {}, tool.name), tool.requires_approval
          ? h("span", { class: "badge needs-approval", title: "a person approves each call before it runs" },
            "approval") : null),
        h("td", {}, tool.kind),
        h("td", {}, h("span", { class: `badge effect-${tool.effect}` }, tool.effect)),
        h("td", {}, tool.idempotent ? "yes" : "no"),
        h("td", {}, `${tool.timeout_s} s`),
        h("td", {}, tool.max_attempts),
        h("td", { class: "description" }, tool.description),
        h("td", {}, h("details", {}, h("summary", {}, "schema"), json(tool.parameters))))))));
}
