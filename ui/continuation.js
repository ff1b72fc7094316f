// The continuation viewer: GET /v1/runs/{id}/continuation for a chosen format and snapshot, its
// warnings and repairs, the JSON, and a button that copies the API's answer exactly as it came.

import { request, runPath, url } from "./api.js";
import { errorBox, h, replace, section } from "./dom.js";

/** The panel for `runId`: `{ element, setSnapshots(list), show(seq) }`. */
export function continuationPanel(runId) {
  const format = h("select", { id: "cont-format", name: "format" }, h("option", { value: "otel" }, "otel"));
  const at = h("select", { id: "cont-at", name: "at" }, h("option", { value: "" }, "latest complete"));
  const interrupted = h("input", { type: "checkbox", id: "cont-interrupted", name: "include_interrupted" });
  const repair = h("input", { type: "checkbox", id: "cont-repair", name: "repair" });
  const output = h("div", { id: "cont-output", "aria-live": "polite" });
  const form = h(
    "form",
    { class: "filters", id: "cont-form", "aria-label": "Continuation options" },
    h("div", { class: "field" }, h("label", { for: "cont-format" }, "Format"), format),
    h("div", { class: "field" }, h("label", { for: "cont-at" }, "Snapshot"), at),
    h("div", { class: "field check" }, interrupted, h("label", { for: "cont-interrupted" }, "Latest may be interrupted")),
    h("div", { class: "field check" }, repair, h("label", { for: "cont-repair" }, "Repair unanswered calls")),
    h("div", { class: "field buttons" }, h("button", { type: "submit", id: "cont-show" }, "Show continuation")),
  );
  const element = section("continuation", "Continuation", form, output);

  // The formats come from the server so the menu matches what the API renders.
  fetch("/ui/formats.json", { cache: "no-store" })
    .then((r) => (r.ok ? r.json() : null))
    .then((body) => {
      const names = Array.isArray(body?.formats) ? body.formats : [];
      if (names.length === 0) return;
      const chosen = format.value;
      replace(format, names.map((n) => h("option", { value: n, selected: n === chosen }, n)));
    })
    .catch(() => {});

  let generation = 0;
  const load = async () => {
    const mine = ++generation;
    const path = url(runPath(runId, "/continuation"), {
      format: format.value,
      at: at.value,
      include_interrupted: !at.value && interrupted.checked ? "true" : "",
      repair: repair.checked ? "true" : "",
    });
    replace(output, h("p", { class: "muted" }, "Loading…"));
    try {
      const { json, text } = await request(path);
      if (mine === generation) show(output, path, json, text);
    } catch (error) {
      if (mine === generation) replace(output, h("p", {}, h("code", {}, path)), errorBox(error));
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });

  return {
    element,
    setSnapshots(snapshots) {
      const chosen = at.value;
      replace(
        at,
        h("option", { value: "" }, "latest complete"),
        snapshots.map((s) =>
          h("option", { value: String(s.seq), selected: String(s.seq) === chosen }, `#${s.seq} · step ${s.step_index} · ${s.state}`),
        ),
      );
    },
    show(seq) {
      at.value = String(seq);
      element.scrollIntoView({ block: "start" });
      load();
      format.focus({ preventScroll: true });
    },
  };
}

function show(output, path, json, text) {
  const warnings = Array.isArray(json?.warnings) ? json.warnings : [];
  const repaired = Array.isArray(json?.repaired) ? json.repaired : [];
  const unresolved = Array.isArray(json?.unresolved_effects) ? json.unresolved_effects : [];
  const snapshot = json?.snapshot;
  const status = h("span", { class: "copy-status", role: "status" });
  const copy = h("button", { type: "button", id: "cont-copy", dataset: { copy: text } }, "Copy JSON");
  copy.addEventListener("click", async () => {
    status.textContent = (await copyText(text)) ? " Copied." : " Copy failed: select the text below.";
  });
  let pretty = text;
  try {
    pretty = JSON.stringify(json, null, 2);
  } catch {
    // Shown as received.
  }
  replace(
    output,
    h("p", {}, "GET ", h("code", { id: "cont-url" }, path)),
    snapshot
      ? h(
          "p",
          { id: "cont-snapshot" },
          `Snapshot #${snapshot.seq} (step ${snapshot.step_index}), `,
          h("span", { class: `badge badge-${snapshot.state}` }, snapshot.state),
          `, ${snapshot.message_count} messages.`,
        )
      : null,
    warnings.length
      ? h("div", { class: "warning", role: "note" }, h("h3", {}, "Warnings"), h("ul", { id: "cont-warnings" }, warnings.map((w) => h("li", {}, w))))
      : null,
    repaired.length
      ? h(
          "div",
          { class: "note" },
          h("h3", {}, "Repaired"),
          h("ul", {}, repaired.map((r) => h("li", {}, `${r.tool_name} (${r.tool_call_id}) answered as interrupted at message ${r.message_index}`))),
        )
      : null,
    unresolved.length
      ? h(
          "div",
          { class: "warning", role: "note" },
          h("h3", {}, "Unresolved effects"),
          h("ul", {}, unresolved.map((e) => h("li", {}, `${e.tool_name} (${e.tool_call_id}): ${String(e.status).replaceAll("_", " ")}`))),
        )
      : null,
    h("p", {}, copy, status),
    h("pre", { id: "cont-json", tabindex: "0", "aria-label": "Continuation JSON" }, pretty),
  );
}

/** Copies `text` to the clipboard; true when it worked. */
async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = h("textarea", { class: "visually-hidden", readonly: true });
    area.value = text;
    document.body.append(area);
    area.select();
    let done = false;
    try {
      done = document.execCommand("copy");
    } catch {
      done = false;
    }
    area.remove();
    return done;
  }
}
