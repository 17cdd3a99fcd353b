"""What the browser tests share: Debian's chromium driven by Selenium (headless), signing in with
the server's token, finding and clicking through live re-renders, and screenshots kept where
``TPLOG_SCREENSHOTS`` says (CI: .ci/screenshots) or in a temp dir. Under ``CI=true`` a missing
chromium fails the test (``.ci/run`` installs it); elsewhere it skips, naming what to install.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.server_harness import ServerProcess, wait_until

CHROMIUM = os.environ.get("TPLOG_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TPLOG_CHROMEDRIVER", "/usr/bin/chromedriver")
TOKEN = "browser-" + "t" * 24
AUTH = {"authorization": f"Bearer {TOKEN}"}
WIDTH = 1280


def need_browser() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:  # a declared test dependency: a broken install fails, it does not skip
        pytest.fail("the selenium package is missing (pip install -e '.[test]')")
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        msg = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def chromium() -> Iterator[Any]:
    """A headless chromium (the ``driver`` fixtures yield from this)."""
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WIDTH},1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console errors: see console_errors()
    drv = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()


def shots_dir(tmp_path_factory: pytest.TempPathFactory, name: str = "screenshots") -> Path:
    keep = os.environ.get("TPLOG_SCREENSHOTS")
    shots = Path(keep) if keep else tmp_path_factory.mktemp(name)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def find(drv: Any, css: str, timeout: float = 15.0) -> Any:
    from selenium.webdriver.common.by import By

    return wait_until(lambda: drv.find_elements(By.CSS_SELECTOR, css), timeout=timeout)


def shoot(drv: Any, path: Path, width: int = WIDTH) -> None:
    """A screenshot of the whole page: the window grown to the page's height first."""
    height = drv.execute_script("return document.documentElement.scrollHeight")
    drv.set_window_size(width, max(800, min(int(height) + 200, 4000)))
    drv.save_screenshot(str(path))
    drv.set_window_size(WIDTH, 1000)


def click(drv: Any, css: str) -> None:
    """Click the first match; again if a live re-render replaced it between finding and clicking."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt() -> bool:
        try:
            find(drv, css)[0].click()
            return True
        except StaleElementReferenceException:
            return False

    wait_until(attempt)


def login(drv: Any, srv: ServerProcess) -> None:
    """Once, as a person would open the link: the token goes to a cookie and out of the address bar."""
    drv.get(f"{srv.url}/?token={TOKEN}")
    wait_until(lambda: drv.current_url == srv.url + "/")


def main_text(drv: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(drv.find_element(By.TAG_NAME, "main").text)


def keys(drv: Any, *ks: str) -> None:
    """Keys typed at the page (whatever has the focus), as a person would."""
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(drv)
    for k in ks:
        chain.send_keys(k)
    chain.perform()


# WCAG 2 contrast of every visible element's own text against the first opaque background behind it
_CONTRAST = """
const lum = (c) => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map((v) => {
  v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const opaque = (c) => { const a = c.match(/[\\d.]+/g); return a && (a.length < 4 || Number(a[3]) === 1); };
const bg = (el) => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
  if (opaque(c)) return c; } return "rgb(255, 255, 255)"; };
const out = [];
for (const el of document.querySelectorAll("body *")) {
  const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.data.trim());
  if (!own || !el.getClientRects().length) continue;
  const a = lum(getComputedStyle(el).color), b = lum(bg(el));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < arguments[0]) out.push([el.tagName + "." + el.className, el.textContent.slice(0, 40), ratio]);
}
return out;
"""


def low_contrast(drv: Any, minimum: float = 4.5) -> list[Any]:
    """The page's texts below ``minimum`` (WCAG AA for body text: 4.5), as (element, text, ratio)."""
    return list(drv.execute_script(_CONTRAST, minimum))


def console_errors(drv: Any) -> list[str]:
    """The console's errors since the last call (a script error, a refused module, a CSP violation)."""
    return [e["message"] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
