// Small helpers to build the pages' DOM without a framework, and to show API problems.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** An HTML element: h("a", {href: "#/x", class: "y"}, "text", child, ...). */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, same signature as h(). */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** A time as the API gives it, shown in UTC to the millisecond. */
export function when(iso) {
  if (!iso) return "";
  return iso.replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace("Z", " UTC");
}

/** A duration in milliseconds, short. */
export function span(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (Math.abs(ms) < 1000) return `${Math.round(ms)} ms`;
  if (Math.abs(ms) < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  if (Math.abs(ms) < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

export function json(value) {
  return h("pre", { class: "json" }, value === undefined ? "" : JSON.stringify(value, null, 2));
}

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status);
}

/** A problem document as the user sees it: what failed, the status, the detail, the field errors. */
export function problemBox(error, hint) {
  const problem = error.problem || { detail: String(error.message || error) };
  const status = error.status ? `${error.status} ${problem.title || ""}`.trim() : problem.title || "Error";
  const where = error.method ? `${error.method} ${error.path}` : "";
  return h("div", { class: "problem", role: "alert", "data-testid": "problem", "data-status": error.status || 0 },
    h("strong", {}, status),
    where && h("span", { class: "where" }, ` — ${where}`),
    problem.detail && problem.detail !== problem.title && h("p", {}, problem.detail),
    (problem.errors || []).length > 0 && h("ul", {},
      problem.errors.map((item) => h("li", {}, h("code", {}, item.field), ": ", item.message))),
    hint && h("p", { class: "hint" }, hint));
}

/** Replace the children of `node`. */
export function show(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

/** Run `action` (a promise-returning function) on a button's click, disabling it meanwhile. */
export function button(label, attrs, action) {
  const node = h("button", { type: "button", ...attrs }, label);
  node.addEventListener("click", async (event) => {
    event.stopPropagation();
    node.disabled = true;
    try {
      await action(event);
    } finally {
      node.disabled = false;
    }
  });
  return node;
}
