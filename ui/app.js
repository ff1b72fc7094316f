// The run explorer's entry point: a hash router between the runs list (#/ with filters as a
// query, e.g. #/?status=running) and a run's page (#/runs/<run id>).

import { forgetToken } from "./api.js";
import { renderRuns } from "./runs.js";
import { renderRun } from "./run.js";

const main = document.getElementById("main");

// The view in place; `stop()` ends its polling before the next one renders.
let current = null;

function route() {
  current?.stop();
  const hash = location.hash.replace(/^#/, "") || "/";
  const cut = hash.indexOf("?");
  const path = cut < 0 ? hash : hash.slice(0, cut);
  const query = cut < 0 ? "" : hash.slice(cut + 1);
  const run = /^\/runs\/(.+)$/s.exec(path);
  if (run) {
    let runId = run[1];
    try {
      runId = decodeURIComponent(runId);
    } catch {
      // Not percent-encoded by us: use it as written.
    }
    document.title = `Run ${runId} · stepline`;
    current = renderRun(main, runId);
  } else {
    document.title = "Runs · stepline";
    current = renderRuns(main, new URLSearchParams(query));
  }
  main.focus({ preventScroll: true });
}

document.getElementById("forget-token").addEventListener("click", () => {
  forgetToken();
  route();
});
window.addEventListener("hashchange", route);
route();
