// The console's only way to the server: the public /v1 API with the user's key as a Bearer token.
// Errors arrive as RFC 9457 problem documents; they are thrown as ApiError for the page to show.

const KEY = "toolrelay.api_key";

export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(KEY);
}

/** A failed API call: the HTTP status and the problem document (or one made up for a non-JSON answer). */
export class ApiError extends Error {
  constructor(status, problem, method, path) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
    this.method = method;
    this.path = path;
  }
}

async function problemOf(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") return body;
  } catch {
    // not JSON: described below
  }
  return { title: response.statusText || "Error", status: response.status, detail: text.slice(0, 300) };
}

/**
 * Call the API. `query` entries that are empty are left out. A 401 forgets the key and tells the
 * app (the "toolrelay:unauthorized" event), which sends the user back to the key field.
 */
export async function api(method, path, { query, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json", Authorization: `Bearer ${apiKey() || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (exc) {
    throw new ApiError(0, { title: "Network error", detail: `the server did not answer (${exc.message})` },
      method, path);
  }
  if (!response.ok) {
    const error = new ApiError(response.status, await problemOf(response), method, path);
    if (response.status === 401) {
      forgetApiKey();
      window.dispatchEvent(new CustomEvent("toolrelay:unauthorized", { detail: error }));
    }
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

export const get = (path, query) => api("GET", path, { query });
export const post = (path, body) => api("POST", path, { body: body ?? {} });
