// The step timeline: model requests and tool calls of a run as bars on one time axis, built from
// GET /v1/runs/{id}/events. A bar without an end (the process died, or it is still running) is
// drawn up to the end of the axis and marked open.

import { duration, h, parseTime } from "./dom.js";

/** Pairs the run's events into bars: `{ kind, label, start, end, outcome, detail }` (times in ms). */
export function bars(events) {
  const out = [];
  const openModel = new Map(); // span id (or "") -> queue of bars
  const openTool = new Map(); // tool call id -> queue of bars
  const push = (map, key, bar) => {
    if (!map.has(key)) map.set(key, []);
    map.get(key).push(bar);
  };
  const take = (map, key) => map.get(key)?.shift();
  let models = 0;
  let run = null;
  for (const event of events) {
    const t = parseTime(event.timestamp);
    if (!Number.isFinite(t)) continue;
    const toolKey = event.tool_call_id ?? "";
    switch (event.kind) {
      case "run_started":
        run = { kind: "run", label: "run", start: t, end: null, outcome: "running" };
        out.push(run);
        break;
      case "run_completed":
      case "run_failed":
      case "run_abandoned":
        if (run) {
          run.end = t;
          run.outcome = event.kind.replace("run_", "");
        }
        break;
      case "model_request_started": {
        models += 1;
        const bar = { kind: "model", label: `model request ${models}`, start: t, end: null, outcome: "open" };
        out.push(bar);
        push(openModel, event.span_id ?? "", bar);
        break;
      }
      case "model_request_completed":
      case "model_request_failed": {
        let bar = take(openModel, event.span_id ?? "");
        if (!bar) {
          models += 1;
          bar = { kind: "model", label: `model request ${models}`, start: t, end: null };
          out.push(bar);
        }
        bar.end = t;
        bar.outcome = event.kind.endsWith("failed") ? "failed" : "completed";
        bar.detail = event.error;
        break;
      }
      case "tool_call_requested": {
        const bar = {
          kind: "tool",
          label: `${event.tool_name ?? "tool"} (${toolKey || "no id"})`,
          toolCallId: toolKey,
          start: t,
          end: null,
          outcome: "requested",
        };
        out.push(bar);
        push(openTool, toolKey, bar);
        break;
      }
      case "tool_call_started": {
        const queue = openTool.get(toolKey);
        let bar = queue?.find((b) => b.outcome === "requested");
        if (!bar) {
          bar = { kind: "tool", label: `${event.tool_name ?? "tool"} (${toolKey || "no id"})`, toolCallId: toolKey, end: null };
          out.push(bar);
          push(openTool, toolKey, bar);
        }
        bar.requested = bar.start;
        bar.start = t;
        bar.outcome = "started";
        break;
      }
      case "tool_call_completed":
      case "tool_call_failed": {
        let bar = take(openTool, toolKey);
        if (!bar) {
          bar = { kind: "tool", label: `${event.tool_name ?? "tool"} (${toolKey || "no id"})`, toolCallId: toolKey, start: t };
          out.push(bar);
        }
        bar.end = t;
        bar.outcome = event.kind.endsWith("failed") ? "failed" : "completed";
        bar.detail = event.error;
        break;
      }
      default:
        break;
    }
  }
  return out;
}

/** The timeline figure for `events` (sorted by seq, as the API gives them). */
export function timeline(events) {
  const all = bars(events);
  if (all.length === 0) return h("p", { class: "muted" }, "No steps recorded.");
  const times = all.flatMap((b) => [b.start, b.end]).filter(Number.isFinite);
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, t0 + 1);
  const span = t1 - t0;
  const pct = (t) => `${(((t - t0) / span) * 100).toFixed(3)}%`;
  const rows = all.map((bar) => {
    const open = !Number.isFinite(bar.end);
    const end = open ? t1 : bar.end;
    const length = end - bar.start;
    const el = h("div", {
      class: `bar bar-${bar.kind} outcome-${bar.outcome}${open ? " open" : ""}`,
      title: `${bar.label}: ${open ? "no end recorded" : duration(length)} (${bar.outcome})${bar.detail ? ` — ${bar.detail}` : ""}`,
    });
    el.style.left = pct(bar.start);
    el.style.width = `max(3px, ${(((end - bar.start) / span) * 100).toFixed(3)}%)`;
    const said = `starts at +${duration(bar.start - t0)}, ${open ? "no end recorded" : `lasts ${duration(length)}`}, ${bar.outcome.replaceAll("_", " ")}`;
    return h(
      "li",
      { class: `step step-${bar.kind}`, dataset: { kind: bar.kind, outcome: bar.outcome, toolCallId: bar.toolCallId } },
      h("span", { class: "step-label" }, bar.label),
      h("span", { class: "track" }, el, h("span", { class: "visually-hidden" }, said)),
      h("span", { class: "step-time" }, open ? "open" : duration(length)),
    );
  });
  return h(
    "figure",
    { class: "timeline" },
    h("ol", { class: "steps" }, rows),
    h(
      "figcaption",
      { class: "axis" },
      h("span", {}, "0"),
      h("span", {}, `Time since the first event; whole axis ${duration(span)}. Blue: model requests, green: tool calls, hatched: no end recorded.`),
      h("span", {}, duration(span)),
    ),
  );
}
