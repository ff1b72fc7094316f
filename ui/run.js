// A run's page: what the record says, its lineage, the step timeline, the effects ledger, the
// snapshots and the continuation viewer. Refreshes every few seconds while the run is running.

import { get, runPath, url } from "./api.js";
import { continuationPanel } from "./continuation.js";
import { badge, duration, errorBox, h, jsonCell, parseTime, replace, runLink, section, time } from "./dom.js";
import { timeline } from "./timeline.js";

const POLL_MS = 3000;
const UNRESOLVED = new Set(["requested", "started", "unknown_after_crash", "waiting"]);
// Lineage fields a run record may carry besides parent_run_id (shown when present).
const LINEAGE = [
  ["continued_from", "Continued from"],
  ["continued_from_run_id", "Continued from"],
  ["forked_from", "Forked from"],
  ["forks", "Forks"],
  ["continuations", "Continued by"],
];

/** Renders the page of `runId` into `main`; returns `{ stop }`. */
export function renderRun(main, runId) {
  const head = h("div", { id: "run-head" }, h("p", { class: "muted" }, "Loading run…"));
  const parts = {
    lineage: h("div"),
    timeline: h("div"),
    effects: h("div"),
    snapshots: h("div"),
  };
  const panel = continuationPanel(runId);
  replace(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/" }, "← All runs")),
    head,
    section("lineage", "Lineage", parts.lineage),
    section("timeline", "Step timeline", parts.timeline),
    section("effects", "Effects ledger", parts.effects),
    section("snapshots", "Snapshots", parts.snapshots),
    panel.element,
  );

  let stopped = false;
  let timer = null;
  let last = null;
  const refresh = async () => {
    timer = null;
    if (stopped) return;
    // Poll again while the run is running, or after an error that may pass (not a 404).
    let again = true;
    try {
      const [record, events, effects, snapshots, delegates] = await Promise.all([
        get(runPath(runId)),
        get(runPath(runId, "/events")),
        get(runPath(runId, "/effects")),
        get(runPath(runId, "/snapshots")),
        get(url("/v1/runs", { parent_run_id: runId, limit: 1000 })),
      ]);
      again = record?.status === "running";
      const text = JSON.stringify([record, events, effects, snapshots, delegates]);
      if (!stopped && text !== last) {
        last = text;
        showHead(head, record);
        showLineage(parts.lineage, record, delegates?.runs ?? []);
        replace(parts.timeline, timeline(events?.events ?? []));
        showEffects(parts.effects, effects?.effects ?? []);
        showSnapshots(parts.snapshots, snapshots?.snapshots ?? [], panel);
        panel.setSnapshots(snapshots?.snapshots ?? []);
      }
    } catch (error) {
      if (!stopped) replace(head, h("h1", {}, "Run ", h("span", { class: "mono" }, runId)), errorBox(error));
      last = null;
      again = error?.status !== 404;
    }
    if (!stopped && again) timer = setTimeout(refresh, POLL_MS);
  };
  refresh();
  return {
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}

function showHead(head, run) {
  const started = parseTime(run.started_at);
  const ended = parseTime(run.ended_at);
  const item = (term, ...value) => [h("dt", {}, term), h("dd", {}, ...value)];
  replace(
    head,
    h("h1", {}, `Run of ${run.agent_name ?? "an unnamed agent"} `, badge(run.status)),
    h(
      "dl",
      { class: "facts" },
      item("Run id", h("code", { id: "run-id" }, run.run_id)),
      run.aliases?.length ? item("Aliases", run.aliases.map((a, i) => [i ? ", " : "", h("code", {}, a)])) : null,
      item("Trace id", h("code", {}, run.trace_id)),
      item(
        "Conversation",
        run.conversation_id
          ? h("a", { href: `#/?${new URLSearchParams({ conversation_id: run.conversation_id })}` }, run.conversation_id)
          : "—",
      ),
      item("Started", time(run.started_at)),
      item("Ended", time(run.ended_at)),
      item("Duration", run.ended_at ? duration(ended - started) : "still open"),
      item(
        "Counts",
        `${run.model_request_count} model requests, ${run.tool_call_count} tool calls, ${run.snapshot_count} snapshots, ${run.event_count} events`,
      ),
      item("Tokens", `${run.input_tokens} in, ${run.output_tokens} out`),
      run.error ? item("Error", h("span", { class: "error-text" }, run.error)) : null,
    ),
    run.continuation_unavailable
      ? h("p", { class: "warning", role: "note" }, `No continuation can be built: ${run.continuation_unavailable}`)
      : null,
    run.warnings?.length
      ? h("ul", { class: "warnings", "aria-label": "Interpretation warnings" }, run.warnings.map((w) => h("li", {}, w)))
      : null,
  );
}

function showLineage(el, run, delegates) {
  const rows = [];
  rows.push(h("dt", {}, "Parent run"), h("dd", { id: "lineage-parent" }, run.parent_run_id ? runLink(run.parent_run_id) : "none (a top-level run)"));
  rows.push(
    h("dt", {}, "Delegates"),
    h(
      "dd",
      { id: "lineage-delegates" },
      delegates.length
        ? h("ul", {}, delegates.map((d) => h("li", {}, runLink(d.run_id), ` ${d.agent_name ?? ""} `, badge(d.status))))
        : "none",
    ),
  );
  for (const [key, label] of LINEAGE) {
    const value = run[key];
    if (value === undefined || value === null) continue;
    const ids = (Array.isArray(value) ? value : [value])
      .map((v) => (typeof v === "string" ? v : v?.run_id))
      .filter((v) => typeof v === "string");
    rows.push(h("dt", {}, label), h("dd", {}, ids.length ? ids.map((id, i) => [i ? ", " : "", runLink(id)]) : "none"));
  }
  replace(el, h("dl", { class: "facts" }, rows));
}

function showEffects(el, effects) {
  if (effects.length === 0) {
    replace(el, h("p", { class: "muted" }, "No tool calls."));
    return;
  }
  const unresolved = effects.filter((e) => UNRESOLVED.has(e.status));
  const note = unresolved.length
    ? h(
        "p",
        { class: "warning", role: "note", id: "unresolved-note" },
        `${unresolved.length} tool call${unresolved.length === 1 ? " has" : "s have"} no known outcome: `,
        unresolved.map((e, i) => [i ? ", " : "", h("code", {}, `${e.tool_name} (${e.tool_call_id})`)]),
        ". It may or may not have had its effect: check before running it again.",
      )
    : h("p", { class: "muted" }, "Every tool call has a known outcome.");
  replace(
    el,
    note,
    h(
      "table",
      { class: "effects", id: "effects-table" },
      h("caption", { class: "visually-hidden" }, "Tool calls of the run, highlighted when their outcome is unknown"),
      h(
        "thead",
        {},
        h("tr", {}, ["Tool call", "Tool", "Status", "Arguments", "Requested", "Started", "Ended", "Result or error"].map((t) => h("th", { scope: "col" }, t))),
      ),
      h(
        "tbody",
        {},
        effects.map((e) => {
          const open = UNRESOLVED.has(e.status);
          return h(
            "tr",
            {
              class: open ? `unresolved status-${e.status}` : `status-${e.status}`,
              dataset: { toolCallId: e.tool_call_id, status: e.status, unresolved: String(open) },
            },
            h("th", { scope: "row" }, h("code", {}, e.tool_call_id), e.occurrence ? ` #${e.occurrence + 1}` : null),
            h("td", {}, e.tool_name),
            h("td", {}, badge(e.status), open ? h("span", { class: "flag" }, " unresolved") : null),
            h("td", {}, jsonCell(e.arguments)),
            h("td", {}, time(e.requested_at)),
            h("td", {}, time(e.started_at)),
            h("td", {}, time(e.ended_at)),
            h("td", {}, e.error ? h("span", { class: "error-text" }, e.error) : jsonCell(e.result)),
          );
        }),
      ),
    ),
  );
}

function showSnapshots(el, snapshots, panel) {
  if (snapshots.length === 0) {
    replace(el, h("p", { class: "muted" }, "No snapshots."));
    return;
  }
  replace(
    el,
    h(
      "table",
      { class: "snapshots", id: "snapshots-table" },
      h("caption", { class: "visually-hidden" }, "Snapshots of the message history at step boundaries"),
      h(
        "thead",
        {},
        h("tr", {}, ["Seq", "Step", "State", "Source", "Messages", "Time", "Reason", ""].map((t) => h("th", { scope: "col" }, t))),
      ),
      h(
        "tbody",
        {},
        snapshots.map((s) =>
          h(
            "tr",
            { class: `state-${s.state}`, dataset: { seq: s.seq, state: s.state } },
            h("th", { scope: "row" }, s.seq),
            h("td", {}, s.step_index),
            h("td", {}, s.state === "complete" ? badge("complete", "✓ complete") : badge("interrupted", "⚠ interrupted")),
            h("td", {}, s.source),
            h("td", { class: "num" }, s.message_count),
            h("td", {}, time(s.timestamp)),
            h("td", {}, s.reason ?? "—"),
            h("td", {}, h("button", { type: "button", onclick: () => panel.show(s.seq) }, `Continuation at ${s.seq}`)),
          ),
        ),
      ),
    ),
  );
}
