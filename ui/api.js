// Talks to the query API on the same origin. The token is asked for only when the API answers 401,
// kept in sessionStorage (this tab only) and sent as a bearer token on every data request.

const TOKEN_KEY = "stepline.apiToken";

/** An answer that is not 2xx: `status` and the API's `{"error": ...}` message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  // The page cannot work without the token: Escape does not dismiss the prompt.
document.getElementById("token-dialog")?.addEventListener("cancel", (event) => event.preventDefault());
updateForgetButton();
}

function updateForgetButton() {
  const button = document.getElementById("forget-token");
  if (button) button.hidden = !token();
}

// One prompt at a time: concurrent 401s wait for the same answer.
let pending = null;

function askForToken(reason) {
  if (pending) return pending;
  const dialog = document.getElementById("token-dialog");
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  document.getElementById("token-reason").textContent = reason;
  input.value = "";
  pending = new Promise((resolve) => {
    const done = (event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (!value) return;
      form.removeEventListener("submit", done);
      sessionStorage.setItem(TOKEN_KEY, value);
      // The page cannot work without the token: Escape does not dismiss the prompt.
document.getElementById("token-dialog")?.addEventListener("cancel", (event) => event.preventDefault());
updateForgetButton();
      dialog.close();
      pending = null;
      resolve();
    };
    form.addEventListener("submit", done);
    dialog.showModal();
    input.focus();
  });
  return pending;
}

/**
 * GETs (or POSTs) an API path. Returns `{ json, text }`: the parsed body and its exact text.
 * On 401 asks for the token and tries again.
 */
export async function request(path, { method = "GET" } = {}) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const current = token();
    if (current) headers.Authorization = `Bearer ${current}`;
    const response = await fetch(path, { method, headers, cache: "no-store", credentials: "omit" });
    const text = await response.text();
    if (response.status === 401) {
      if (current) sessionStorage.removeItem(TOKEN_KEY);
      await askForToken(
        current
          ? "The API refused that token. Enter the API token again."
          : "This stepline requires a bearer token for its query API.",
      );
      continue;
    }
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
    if (!response.ok) {
      const message = json && typeof json.error === "string" ? json.error : text || response.statusText;
      throw new ApiError(response.status, `${response.status}: ${message}`);
    }
    return { json, text };
  }
}

/** GETs an API path and returns its parsed JSON. */
export async function get(path) {
  return (await request(path)).json;
}

/** Builds `/v1/...?k=v` from a path and the non-empty entries of `params`. */
export function url(path, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "" && value !== false) query.set(key, String(value));
  }
  const qs = query.toString();
  return qs ? `${path}?${qs}` : path;
}

export function runPath(runId, tail = "") {
  return `/v1/runs/${encodeURIComponent(runId)}${tail}`;
}

// The page cannot work without the token: Escape does not dismiss the prompt.
document.getElementById("token-dialog")?.addEventListener("cancel", (event) => event.preventDefault());
updateForgetButton();
