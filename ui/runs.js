// The runs list: the filters GET /v1/runs takes, kept in the URL (#/?status=running&...), and a
// live refresh that polls the first page every few seconds while the tab is visible.

import { get, url } from "./api.js";
import { badge, duration, errorBox, h, parseTime, replace, shortRunLink, time } from "./dom.js";

const POLL_MS = 2000;
const STATUSES = ["running", "completed", "failed", "abandoned", "waiting"];
const TEXT_FILTERS = [
  ["agent_name", "Agent"],
  ["conversation_id", "Conversation"],
  ["parent_run_id", "Parent run"],
  ["trace_id", "Trace id"],
];
const LIMITS = ["25", "100", "500"];

// Live refresh stays as the user set it while they move between pages.
let live = true;

/** Renders the list into `main` for the filters in `params`; returns `{ stop }`. */
export function renderRuns(main, params) {
  const filters = {};
  for (const key of ["status", "limit", "cursor", ...TEXT_FILTERS.map(([k]) => k)]) {
    if (params.get(key)) filters[key] = params.get(key);
  }
  const status = h("p", { class: "muted", role: "status", id: "runs-status" }, "Loading runs…");
  const table = h("table", { class: "runs", id: "runs-table" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const liveBox = h("input", { type: "checkbox", id: "live", checked: live });
  replace(
    main,
    h("h1", {}, "Runs"),
    filterForm(filters),
    h("p", { class: "live" }, liveBox, " ", h("label", { for: "live" }, `Live refresh (every ${POLL_MS / 1000} s)`)),
    status,
    table,
    pager,
  );

  let stopped = false;
  let timer = null;
  let lastText = null;
  const refresh = async () => {
    timer = null;
    if (stopped) return;
    if (!document.hidden) {
      try {
        const body = await get(url("/v1/runs", filters));
        const text = JSON.stringify(body);
        if (!stopped && text !== lastText) {
          lastText = text;
          show(body, filters, status, table, pager);
        }
      } catch (error) {
        if (!stopped) replace(status, errorBox(error));
        lastText = null;
      }
    }
    if (!stopped && live) timer = setTimeout(refresh, POLL_MS);
  };
  liveBox.addEventListener("change", () => {
    live = liveBox.checked;
    if (live && !timer) refresh();
    if (!live && timer) {
      clearTimeout(timer);
      timer = null;
    }
  });
  refresh();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

function filterForm(filters) {
  const field = (key, label, control) =>
    h("div", { class: "field" }, h("label", { for: `filter-${key}` }, label), control);
  const select = (key, options, anyLabel) =>
    h(
      "select",
      { id: `filter-${key}`, name: key },
      h("option", { value: "" }, anyLabel),
      options.map((o) => h("option", { value: o, selected: filters[key] === o }, o)),
    );
  const form = h(
    "form",
    { class: "filters", "aria-label": "Filter runs", role: "search" },
    field("status", "Status", select("status", STATUSES, "any")),
    TEXT_FILTERS.map(([key, label]) =>
      field(key, label, h("input", { id: `filter-${key}`, name: key, value: filters[key] ?? "", autocomplete: "off" })),
    ),
    field("limit", "Per page", select("limit", LIMITS, "default (100)")),
    h("div", { class: "field buttons" }, h("button", { type: "submit" }, "Apply"), h("a", { href: "#/" }, "Clear")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    for (const [key, value] of new FormData(form)) if (String(value).trim()) query.set(key, String(value).trim());
    const qs = query.toString();
    location.hash = qs ? `#/?${qs}` : "#/";
  });
  return form;
}

function show(body, filters, status, table, pager) {
  const runs = Array.isArray(body?.runs) ? body.runs : [];
  const filtered = Object.keys(filters).some((k) => k !== "limit" && k !== "cursor");
  replace(status, `${runs.length} run${runs.length === 1 ? "" : "s"}${filtered ? " matching the filters" : ""}`,
    h("span", { class: "updated" }, ` · updated ${new Date().toLocaleTimeString()}`));
  replace(
    table,
    h("caption", { class: "visually-hidden" }, "Runs, oldest first"),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ["Run", "Agent", "Status", "Conversation", "Parent", "Started", "Duration", "Model requests", "Tool calls", "Snapshots", "Tokens in / out"].map(
          (t) => h("th", { scope: "col" }, t),
        ),
      ),
    ),
    h("tbody", {}, runs.map(row)),
  );
  const here = new URLSearchParams(filters);
  here.delete("cursor");
  const links = [];
  if (filters.cursor) links.push(h("a", { href: `#/?${here}` }, "First page"));
  if (body?.next_cursor) {
    const next = new URLSearchParams(here);
    next.set("cursor", body.next_cursor);
    links.push(h("a", { href: `#/?${next}` }, "Next page →"));
  }
  replace(pager, links);
}

function row(run) {
  const started = parseTime(run.started_at);
  const ended = run.ended_at ? parseTime(run.ended_at) : NaN;
  const conversation = run.conversation_id
    ? h("a", { href: `#/?${new URLSearchParams({ conversation_id: run.conversation_id })}` }, run.conversation_id)
    : "—";
  return h(
    "tr",
    { dataset: { runId: run.run_id, status: run.status } },
    h("th", { scope: "row" }, shortRunLink(run.run_id)),
    h("td", {}, run.agent_name ?? "—"),
    h("td", {}, badge(run.status)),
    h("td", {}, conversation),
    h("td", {}, run.parent_run_id ? shortRunLink(run.parent_run_id) : "—"),
    h("td", {}, time(run.started_at)),
    h("td", { class: "num" }, run.ended_at ? duration(ended - started) : h("span", { class: "muted" }, "open")),
    h("td", { class: "num" }, run.model_request_count ?? 0),
    h("td", { class: "num" }, run.tool_call_count ?? 0),
    h("td", { class: "num" }, run.snapshot_count ?? 0),
    h("td", { class: "num" }, `${run.input_tokens ?? 0} / ${run.output_tokens ?? 0}`),
  );
}
