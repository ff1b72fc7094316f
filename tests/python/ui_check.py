"""Drives the run explorer (/ui/) in headless Chromium with Selenium and checks it against the API.

Run by tests/ui.rs after a real Pydantic AI scenario and a crashed run have been sent to stepline.
Checks, each against what the query API itself answers:
  - with a token configured: the page asks for it (a wrong one is asked again), then works;
    without one: no prompt;
  - the runs list shows the expected runs, filters by status, and picks up a new run by itself
    (live refresh) after this script sends one more span over OTLP/HTTP;
  - lineage links between the orchestrator and its delegate;
  - the crashed run's page highlights the unresolved tool call (ledger and timeline);
  - the continuation viewer's copied text (read back from the clipboard) equals the API's answer,
    and the warnings it shows are the API's.
Saves screenshots (runs list, run page, continuation) into --screenshots.
Prints one line `UI_CHECK {json}` on success; raises with the details on failure.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

WAIT_S = 30


def api_get(api: str, path: str, token: str | None) -> str:
    request = urllib.request.Request(api.rstrip("/") + path)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode("utf-8")


def send_probe_span(otlp: str, conversation_id: str) -> None:
    """One Pydantic-AI-scoped chat span over OTLP/HTTP JSON: stepline makes a new run of it."""
    now = time.time_ns()
    trace_id = os.urandom(16).hex()

    def attr(key: str, value: str) -> dict:
        return {"key": key, "value": {"stringValue": value}}

    body = {
        "resourceSpans": [{
            "resource": {"attributes": [attr("service.name", "stepline-ui-probe")]},
            "scopeSpans": [{
                "scope": {"name": "pydantic-ai", "version": "2.68.0"},
                "spans": [{
                    "traceId": trace_id,
                    "spanId": os.urandom(8).hex(),
                    "parentSpanId": os.urandom(8).hex(),
                    "name": "chat probe-model",
                    "kind": 1,
                    "startTimeUnixNano": str(now - 2_000_000),
                    "endTimeUnixNano": str(now - 1_000_000),
                    "attributes": [
                        attr("gen_ai.operation.name", "chat"),
                        attr("gen_ai.request.model", "probe-model"),
                        attr("gen_ai.agent.name", "ui-probe"),
                        attr("gen_ai.conversation.id", conversation_id),
                        attr("gen_ai.provider.name", "function"),
                        attr("gen_ai.input.messages", '[{"role":"user","parts":[{"type":"text","content":"hello"}]}]'),
                        attr("gen_ai.output.messages", '[{"role":"assistant","parts":[{"type":"text","content":"hi"}]}]'),
                    ],
                    "status": {},
                }],
            }],
        }],
    }
    request = urllib.request.Request(
        otlp.rstrip("/") + "/v1/traces",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        if response.status != 200:
            raise AssertionError(f"OTLP/HTTP answered {response.status}")


class Page:
    def __init__(self, driver: webdriver.Chrome, screenshots: str):
        self.driver = driver
        self.screenshots = screenshots
        self.saved: list[str] = []

    def wait(self, what: str, condition, timeout: float = WAIT_S):
        try:
            # The pages re-render live: an element read while it is replaced is read again.
            return WebDriverWait(
                self.driver,
                timeout,
                poll_frequency=0.1,
                ignored_exceptions=(StaleElementReferenceException,),
            ).until(condition)
        except TimeoutException:
            logs = self.browser_log()
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}; at {self.driver.current_url}\n"
                f"--- page text ---\n{self.text()[:4000]}\n--- browser console ---\n{logs}"
            ) from None

    def css(self, selector: str):
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def wait_css(self, selector: str, what: str | None = None):
        return self.wait(what or selector, lambda d: d.find_elements(By.CSS_SELECTOR, selector) or False)[0]

    def text(self) -> str:
        try:
            return self.driver.find_element(By.TAG_NAME, "body").text
        except Exception as error:  # noqa: BLE001 - only for failure messages
            return f"<no body: {error}>"

    def browser_log(self) -> str:
        try:
            return "\n".join(str(e) for e in self.driver.get_log("browser"))
        except Exception as error:  # noqa: BLE001 - only for failure messages
            return f"<no log: {error}>"

    def screenshot(self, name: str, element_id: str | None = None) -> None:
        """A PNG of the whole page (beyond the viewport), or of one element, via DevTools."""
        params: dict = {"format": "png", "captureBeyondViewport": True}
        if element_id:
            box = self.driver.execute_script(
                "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
                "return [r.left + scrollX, r.top + scrollY, r.width, r.height];",
                element_id,
            )
            pad = 12
            params["clip"] = {
                "x": max(box[0] - pad, 0),
                "y": max(box[1] - pad, 0),
                "width": box[2] + 2 * pad,
                "height": min(box[3], 1000) + 2 * pad,
                "scale": 1,
            }
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot", params)
        path = os.path.join(self.screenshots, name)
        with open(path, "wb") as out:
            out.write(base64.b64decode(shot["data"]))
        self.saved.append(path)


def start_browser(chromium: str, chromedriver: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in containers and CI
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1360,900",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


def check_token_prompt(page: Page, ui: str, token: str | None) -> None:
    driver = page.driver
    driver.get(ui)
    if token is None:
        page.wait_css("#runs-table tbody", "the runs table")
        dialog_open = driver.execute_script("return document.getElementById('token-dialog').open")
        assert not dialog_open, "the API has no token, yet the page asked for one"
        return
    page.wait("the token prompt", lambda d: d.execute_script("return document.getElementById('token-dialog').open"))
    field = driver.find_element(By.ID, "token-input")
    field.send_keys("not-the-token" + Keys.ENTER)
    page.wait(
        "the prompt to come back after a wrong token",
        lambda d: d.execute_script("return document.getElementById('token-dialog').open")
        and "refused" in d.find_element(By.ID, "token-reason").text,
    )
    field = driver.find_element(By.ID, "token-input")
    field.send_keys(token + Keys.ENTER)
    page.wait_css("#runs-table tbody", "the runs list after entering the token")
    stored = driver.execute_script("return sessionStorage.getItem('stepline.apiToken')")
    assert stored == token, f"sessionStorage holds {stored!r}"
    assert driver.find_element(By.ID, "forget-token").is_displayed(), "no Forget token button"


def row_ids(page: Page) -> list[str]:
    return [r.get_attribute("data-run-id") for r in page.css("#runs-table tbody tr")]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ui", required=True, help="the explorer's URL, e.g. http://127.0.0.1:4320/ui/")
    parser.add_argument("--api", required=True, help="the API base URL")
    parser.add_argument("--otlp", required=True, help="the OTLP/HTTP receiver base URL")
    parser.add_argument("--token", default=None)
    parser.add_argument("--only-token", action="store_true", help="check the token prompt and one new run only")
    parser.add_argument("--runs", default="", help="comma-separated run ids the list must show")
    parser.add_argument("--orchestrator")
    parser.add_argument("--delegate")
    parser.add_argument("--crashed")
    parser.add_argument("--unresolved-call")
    parser.add_argument("--settled-call")
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = parser.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)
    origin = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(args.ui))
    checks: list[str] = []

    driver = start_browser(args.chromium, args.chromedriver)
    try:
        driver.execute_cdp_cmd(
            "Browser.grantPermissions",
            {"origin": origin, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
        )
        page = Page(driver, args.screenshots)

        # --- token -------------------------------------------------------------------------
        check_token_prompt(page, args.ui, args.token)
        checks.append("token prompt (a wrong token is asked again)" if args.token else "no prompt without a token")
        if args.only_token:
            send_probe_span(args.otlp, "conv-ui-live")
            page.wait(
                "the new run in the list, read with the token",
                lambda d: any("conv-ui-live" in r.text for r in page.css("#runs-table tbody tr")),
                timeout=20,
            )
            checks.append("data requests carry the token")
            return report(driver, checks, page)

        # --- runs list ---------------------------------------------------------------------
        expected = [r for r in args.runs.split(",") if r]
        page.wait(f"runs {expected} in the list", lambda d: set(expected) <= set(row_ids(page)))
        api_runs = [r["run_id"] for r in json.loads(api_get(args.api, "/v1/runs", args.token))["runs"]]
        page.wait("the list to match GET /v1/runs", lambda d: row_ids(page) == api_runs)
        crashed_row = page.css(f'#runs-table tbody tr[data-run-id="{args.crashed}"]')[0]
        assert crashed_row.get_attribute("data-status") == "abandoned", crashed_row.get_attribute("outerHTML")
        checks.append(f"runs list shows {len(api_runs)} runs as the API lists them")

        # Live refresh: a run that arrives while the page is open appears without a reload.
        marker = driver.execute_script("window.__sameDocument = true; return 1")
        send_probe_span(args.otlp, "conv-ui-live")
        page.wait(
            "the new run to appear by live refresh",
            lambda d: any("conv-ui-live" in r.text for r in page.css("#runs-table tbody tr")),
            timeout=20,
        )
        assert driver.execute_script("return window.__sameDocument === true") and marker == 1, "the page reloaded"
        checks.append("live refresh picked up a new run")
        page.screenshot("ui-runs.png")

        # Filter by status: only the abandoned (crashed) run.
        Select(driver.find_element(By.ID, "filter-status")).select_by_value("abandoned")
        driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        page.wait("the status filter", lambda d: row_ids(page) == [args.crashed])
        assert "status=abandoned" in driver.current_url, driver.current_url
        checks.append("status filter")

        # --- lineage -------------------------------------------------------------------------
        driver.get(f"{args.ui}#/runs/{urllib.parse.quote(args.orchestrator, safe='')}")
        link = page.wait_css(f'#lineage-delegates a[href$="{urllib.parse.quote(args.delegate, safe="")}"]', "the delegate link")
        link.send_keys(Keys.ENTER)  # keyboard navigation
        page.wait_css(f'#lineage-parent a[href$="{urllib.parse.quote(args.orchestrator, safe="")}"]', "the parent link on the delegate's page")
        page.wait("the delegate's run id", lambda d: d.find_element(By.ID, "run-id").text == args.delegate)
        checks.append("lineage links parent <-> delegate")

        # --- crashed run ---------------------------------------------------------------------
        driver.get(f"{args.ui}#/?status=abandoned")
        page.wait_css(f'#runs-table a[href$="{urllib.parse.quote(args.crashed, safe="")}"]').click()
        bad = page.wait_css(f'#effects-table tr[data-tool-call-id="{args.unresolved_call}"]', "the unresolved call's row")
        good = page.wait_css(f'#effects-table tr[data-tool-call-id="{args.settled_call}"]', "the settled call's row")
        effects = json.loads(api_get(args.api, f"/v1/runs/{urllib.parse.quote(args.crashed, safe='')}/effects", args.token))["effects"]
        status = {e["tool_call_id"]: e["status"] for e in effects}
        assert status[args.unresolved_call] == "unknown_after_crash", status
        assert "unresolved" in bad.get_attribute("class").split(), bad.get_attribute("outerHTML")
        assert bad.get_attribute("data-status") == status[args.unresolved_call]
        assert "unresolved" not in (good.get_attribute("class") or "").split(), good.get_attribute("outerHTML")
        bad_bg = bad.value_of_css_property("background-color")
        good_bg = good.value_of_css_property("background-color")
        assert bad_bg != good_bg, f"the unresolved row looks like the settled one ({bad_bg})"
        assert "unresolved" in bad.text and "unknown after crash" in bad.text, bad.text
        note = driver.find_element(By.ID, "unresolved-note").text
        assert args.unresolved_call in note, note
        page.wait_css(f'li.step-tool[data-tool-call-id="{args.unresolved_call}"] .bar.open', "the open bar of the unresolved call")
        page.wait_css(f'li.step-tool[data-tool-call-id="{args.settled_call}"] .bar:not(.open)', "the closed bar of the settled call")
        bars = len(page.css("ol.steps li.step-model"))
        assert bars >= 2, f"{bars} model-request bars"
        snapshots = json.loads(api_get(args.api, f"/v1/runs/{urllib.parse.quote(args.crashed, safe='')}/snapshots", args.token))["snapshots"]
        shown = [(r.get_attribute("data-seq"), r.get_attribute("data-state")) for r in page.css("#snapshots-table tbody tr")]
        assert shown == [(str(s["seq"]), s["state"]) for s in snapshots], f"{shown} vs {snapshots}"
        checks.append(f"crashed run: {args.unresolved_call} highlighted ({status[args.unresolved_call]}), open bar, {len(shown)} snapshots")
        page.screenshot("ui-run.png")

        # --- continuation --------------------------------------------------------------------
        Select(driver.find_element(By.ID, "cont-format")).select_by_value("pydantic-ai")
        Select(driver.find_element(By.ID, "cont-at")).select_by_value("")
        driver.find_element(By.ID, "cont-show").click()
        copy = page.wait_css("#cont-copy", "the copy button")
        path = driver.find_element(By.ID, "cont-url").text
        assert "format=pydantic-ai" in path, path
        answer = api_get(args.api, path, args.token)
        copy.click()
        page.wait("the copy confirmation", lambda d: "Copied" in d.find_element(By.CSS_SELECTOR, ".copy-status").text)
        clipboard = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "navigator.clipboard.readText().then(done, (e) => done('CLIPBOARD ERROR ' + e));"
        )
        assert not clipboard.startswith("CLIPBOARD ERROR"), clipboard
        assert json.loads(clipboard) == json.loads(answer), f"copied {clipboard[:2000]}\nAPI {answer[:2000]}"
        assert clipboard == answer, "the copied text is not byte-for-byte the API's answer"
        assert copy.get_attribute("data-copy") == answer
        checks.append(f"copied continuation equals GET {path} ({len(answer)} bytes, read from the clipboard)")

        # A provider format at the interrupted snapshot: the API's warnings are shown.
        interrupted = [s for s in snapshots if s["state"] == "interrupted"]
        if interrupted:
            seq = interrupted[-1]["seq"]
            Select(driver.find_element(By.ID, "cont-format")).select_by_value("openai-chat")
            driver.find_element(By.XPATH, f"//button[normalize-space()='Continuation at {seq}']").click()
            page.wait("the continuation at the interrupted snapshot", lambda d: f"at={seq}" in d.find_element(By.ID, "cont-url").text)
            path = driver.find_element(By.ID, "cont-url").text
            api_warnings = json.loads(api_get(args.api, path, args.token)).get("warnings", [])
            shown = [li.text for li in page.css("#cont-warnings li")]
            assert shown == api_warnings, f"warnings shown {shown}, API {api_warnings}"
            checks.append(f"warnings of {path} shown ({len(shown)})")
        page.screenshot("ui-continuation.png", "continuation")
        return report(driver, checks, page)
    finally:
        driver.quit()


def report(driver: webdriver.Chrome, checks: list[str], page: Page) -> int:
    """Fails on errors in the browser console, else prints the UI_CHECK line."""
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE" and "401" not in e.get("message", "")]
    assert not errors, f"errors in the browser console: {errors}"
    print("UI_CHECK " + json.dumps({"checks": checks, "screenshots": page.saved}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
