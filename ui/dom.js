// Small DOM helpers. Everything the API returns is shown with textContent, never parsed as HTML.

/**
 * Creates an element: h("a", { href: "#/", class: "x" }, "text", child, [more]).
 * Attributes whose value is null, undefined or false are left out; `on*` functions become listeners.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces the children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** Link to a run's page. */
export function runLink(runId, text) {
  return h("a", { href: `#/runs/${encodeURIComponent(runId)}`, class: "mono" }, text ?? runId);
}

/**
 * A run id shortened for tables (`<trace id start>…<span id>`), with the whole id as a tooltip
 * and for screen readers.
 */
export function shortRunLink(runId) {
  if (typeof runId !== "string" || runId.length <= 28) return runLink(runId);
  const link = runLink(runId, `${runId.slice(0, 6)}…${runId.slice(-17)}`);
  link.title = runId;
  link.setAttribute("aria-label", `run ${runId}`);
  return link;
}

/** A status badge; `kind` is the wire status (running, completed, unknown_after_crash, ...). */
export function badge(kind, text) {
  return h("span", { class: `badge badge-${kind}` }, text ?? kind.replaceAll("_", " "));
}

/**
 * Milliseconds since the epoch of an RFC 3339 time, keeping the fraction beyond milliseconds
 * (Date.parse is not required to read more than three fractional digits).
 */
export function parseTime(text) {
  if (typeof text !== "string") return NaN;
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$/i.exec(text.trim());
  if (!m) return Date.parse(text);
  return Date.parse(m[1] + m[3]) + (m[2] ? Number(`0${m[2]}`) * 1000 : 0);
}

/** A short local time for a wire timestamp, with the full value as a tooltip. */
export function time(text) {
  if (!text) return h("span", { class: "muted" }, "—");
  const ms = parseTime(text);
  const shown = Number.isNaN(ms) ? text : new Date(ms).toLocaleString();
  return h("time", { datetime: text, title: text }, shown);
}

/** A duration in milliseconds, readable. */
export function duration(ms) {
  if (!Number.isFinite(ms)) return "—";
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** Compact JSON of a value for a table cell (the full text as a tooltip when cut). */
export function jsonCell(value, max = 120) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "—");
  const text = typeof value === "string" ? value : JSON.stringify(value);
  const cut = text.length > max ? `${text.slice(0, max)}…` : text;
  return h("code", { title: text.length > max ? text.slice(0, 2000) : null }, cut);
}

/** A section with a heading, for the run page. */
export function section(id, title, ...children) {
  return h("section", { id, "aria-labelledby": `${id}-title` }, h("h2", { id: `${id}-title` }, title), ...children);
}

/** An error box announced to screen readers. */
export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error?.message ?? String(error));
}
