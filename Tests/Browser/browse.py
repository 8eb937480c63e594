#!/usr/bin/env python3
"""The real-browser test of `assetcat serve` (run by `make test` after the Swift tests).

Makes a demo catalog with the `assetcat` the test build made (an archive with members, images,
a file with a hostile name), starts `assetcat serve --port 0 --token …`, and drives headless
Chromium through it: the list, a search and a facet, an asset's page, the download of an archive
member (compared byte for byte), a tag, an export, a deletion through its confirmation (its file
gone after the commit), the jobs page. Saves a PNG of each page in .build/browser-screenshots/.

    ASSETCAT=$(swift build --show-bin-path)/assetcat python3 Tests/Browser/browse.py
"""
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / ".build" / "browser-screenshots"
TOKEN = "browser-test-token"
HOSTILE_FILE = "<img src=x onerror=alert(1)>.txt"
HOSTILE_MEMBER = "docs/<script>alert(1)</script>.txt"
checks = {"passed": 0, "failed": 0}


def check(condition, what):
    """Counts one check; a failed one is printed and fails the run at the end."""
    if condition:
        checks["passed"] += 1
    else:
        checks["failed"] += 1
        print(f"FAILED: {what}", file=sys.stderr)


def assetcat():
    found = os.environ.get("ASSETCAT")
    if not found:
        bin_path = subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout.strip()
        found = os.path.join(bin_path, "assetcat")
    if not os.access(found, os.X_OK):
        sys.exit(f"browse.py: no assetcat at {found}: build first (swift build)")
    return found


def make_catalog(tool, work):
    """A catalog of a few files, two images, a hostile name, and a tar with members."""
    files = work / "files"
    files.mkdir()
    (files / "notes.txt").write_text("Notes for the browser test.\n<b>not bold</b>\n")
    (files / HOSTILE_FILE).write_text("<script>alert(2)</script>\n")
    for name in ("red.png", "blue.png"):
        shutil.copy(ROOT / "TestAssets" / "demo" / "photos" / name, files / name)
    members = {
        "docs/readme.txt": b"Read me: a member of an archive.\n",
        "docs/data.bin": bytes(range(256)) * 64,
        HOSTILE_MEMBER: b"a member with a hostile name\n",
    }
    with tarfile.open(files / "bundle.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    catalog = work / "catalog"
    subprocess.run([tool, "init", str(catalog)], check=True, capture_output=True)
    subprocess.run([tool, "add", "--catalog", str(catalog), "--recursive", "--tag", "demo", str(files)],
                   check=True, capture_output=True)
    return catalog, members


def start_server(tool, catalog):
    server = subprocess.Popen([tool, "serve", "--catalog", str(catalog), "--port", "0", "--token", TOKEN],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = server.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        server.kill()
        sys.exit(f"browse.py: assetcat serve printed {url!r}, not its URL: {server.stderr.read()}")
    return server, url


def browser(downloads):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--disable-extensions"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {
        "download.default_directory": str(downloads), "download.prompt_for_download": False,
        "safebrowsing.enabled": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.set_page_load_timeout(30)
    return driver


def shot(driver, name):
    """Saves the whole page (as tall as its content) as a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, max(700, min(height + 40, 2400)))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1280, 900)


def navigate(driver, action, timeout=20):
    """Does `action` (a click on a link or a form's button, Enter in a field), then waits until
    the page it leads to has replaced this one: a click returns once it is dispatched, and the
    old page's elements could otherwise be read as the new page's."""
    old = driver.find_element(By.TAG_NAME, "html")
    action()
    WebDriverWait(driver, timeout).until(expected_conditions.staleness_of(old))


def wait_for_file(folder, suffix, timeout=20):
    """The download whose name ends with `suffix`, once Chromium has finished it. Chromium
    reserves the name with an empty file when a download starts and renames its
    `.crdownload` over it at the end: a file there with no `.crdownload` beside it, and not
    empty (every download here has bytes)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        entries = list(folder.iterdir())
        pending = any(p.name.endswith(".crdownload") for p in entries)
        done = [p for p in entries if p.name.endswith(suffix) and not p.name.endswith(".crdownload")]
        if done and not pending and done[0].stat().st_size > 0:
            return done[0]
        time.sleep(0.1)
    return None


def no_alert(driver, where):
    try:
        driver.switch_to.alert
        check(False, f"{where}: a script ran (an alert is open)")
    except NoAlertPresentException:
        check(True, where)


def object_path(catalog, data):
    digest = hashlib.sha256(data).hexdigest()
    return catalog / "objects" / digest[:2] / digest[2:]


def main():
    started = time.time()
    tool = assetcat()
    SHOTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="assetcat-browser-"))
    downloads = work / "downloads"
    downloads.mkdir()
    catalog, members = make_catalog(tool, work)
    server, url = start_server(tool, catalog)
    driver = None
    try:
        driver = browser(downloads)
        # The list: the token from the printed URL becomes a cookie; the style sheet loads.
        driver.get(url)
        check("token" not in driver.current_url, f"the token left the address bar: {driver.current_url}")
        rows = driver.find_elements(By.CSS_SELECTOR, "table.assets tbody tr")
        check(len(rows) == 8, f"the list shows 8 assets (5 files, 3 members), not {len(rows)}")
        names = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "td.name a")]
        check(HOSTILE_FILE in names, f"the hostile file name shows as text: {names}")
        check(f"bundle.tar:{HOSTILE_MEMBER}" in names, "the hostile member name shows as text")
        background = driver.execute_script(
            "return getComputedStyle(document.querySelector('.top')).backgroundColor")
        check(background == "rgb(246, 248, 251)", f"the style sheet applies (header {background})")
        no_alert(driver, "list")
        shot(driver, "01-list")

        # Search, then a facet adds its filter.
        box = driver.find_element(By.NAME, "q")
        navigate(driver, lambda: box.send_keys("readme", Keys.ENTER))
        found = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "td.name a")]
        check(found == ["bundle.tar:docs/readme.txt"], f"search finds the member: {found}")
        shot(driver, "02-search")
        driver.get(url.split("?")[0] + "?q=demo")
        navigate(driver, driver.find_element(By.LINK_TEXT, "image").click)
        images = sorted(e.text for e in driver.find_elements(By.CSS_SELECTOR, "td.name a"))
        check(images == ["blue.png", "red.png"], f"the kind facet narrows to images: {images}")
        check(driver.find_element(By.NAME, "q").get_attribute("value") == "demo kind:image", "facet's query")
        driver.get(url.split("?")[0] + "?q=size%3E")
        error = driver.find_element(By.ID, "search-error").text
        check(error == "search: column 6: expected a size after `size>`, like 10MB or 512KiB",
              f"a syntax error is its one line: {error!r}")

        # An image's page: the preview loads under the CSP.
        driver.get(url.split("?")[0] + "?q=red")
        navigate(driver, driver.find_element(By.LINK_TEXT, "red.png").click)
        width = driver.execute_script("return document.getElementById('preview-image').naturalWidth")
        check(width > 0, "the image preview loads")
        shot(driver, "03-asset-image")

        # An archive member: its page links its archive; its download is byte for byte.
        driver.get(url.split("?")[0] + "?q=data.bin")
        navigate(driver, driver.find_element(By.PARTIAL_LINK_TEXT, "docs/data.bin").click)
        check(driver.find_element(By.ID, "archive").text == "bundle.tar", "the member's page names its archive")
        crumbs = driver.find_element(By.CSS_SELECTOR, "nav.crumbs").text
        check(crumbs == "Assets / bundle.tar / docs/data.bin", f"the member's crumbs: {crumbs!r}")
        driver.find_element(By.ID, "download").click()
        downloaded = wait_for_file(downloads, "data.bin")
        got = downloaded.read_bytes() if downloaded is not None else None
        check(got == members["docs/data.bin"],
              "the member downloads byte for byte"
              + ("" if got == members["docs/data.bin"] else
                 f" (got {'nothing' if got is None else f'{len(got)} bytes'}, "
                 f"expected {len(members['docs/data.bin'])})"))
        navigate(driver, driver.find_element(By.ID, "archive").click)
        member_rows = driver.find_elements(By.CSS_SELECTOR, "table.assets tbody tr")
        check(len(member_rows) == 3, f"the archive's page lists its 3 members, not {len(member_rows)}")
        shot(driver, "04-asset-archive")

        # The hostile member's page: its name and text preview are text.
        driver.get(url.split("?")[0] + "?q=script")
        navigate(driver, driver.find_element(By.PARTIAL_LINK_TEXT, "alert(1)").click)
        check(driver.find_element(By.ID, "asset-name").text == f"bundle.tar:{HOSTILE_MEMBER}", "hostile heading")
        no_alert(driver, "hostile member page")

        # A tag, added through the form.
        driver.get(url.split("?")[0] + "?q=notes")
        navigate(driver, driver.find_element(By.LINK_TEXT, "notes.txt").click)
        notes_page = driver.current_url
        driver.find_element(By.ID, "new-tag").send_keys("favourite")
        navigate(driver, driver.find_element(By.ID, "add-tag").click)
        tags = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#tags li a")]
        check(tags == ["demo", "favourite"], f"the tag is added: {tags}")
        shot(driver, "05-asset-text-tagged")
        listed = subprocess.run([tool, "ls", "--catalog", str(catalog), "--tag", "favourite"],
                                capture_output=True, text=True).stdout
        check("notes.txt" in listed, "the tag is in the catalog")

        # Export of a selection: a valid bag.
        driver.get(url.split("?")[0])
        for box in driver.find_elements(By.CSS_SELECTOR, "td.select input")[:2]:
            box.click()
        driver.find_element(By.ID, "export").click()
        bundle = wait_for_file(downloads, ".tar")
        check(bundle is not None, "the export downloads")
        if bundle:
            valid = subprocess.run([tool, "validate", str(bundle)], capture_output=True, text=True)
            check(valid.returncode == 0 and "is valid" in valid.stdout, f"the export is a valid bag: {valid.stdout}")

        # A deletion through its confirmation: the file goes after the commit.
        notes = object_path(catalog, (work / "files" / "notes.txt").read_bytes())
        check(notes.exists(), "the text's content is in objects/ before the deletion")
        driver.get(notes_page)
        navigate(driver, driver.find_element(By.ID, "delete").click)
        check(notes.exists(), "the confirmation page changes nothing")
        shot(driver, "06-confirm-delete")
        navigate(driver, driver.find_element(By.ID, "confirm-delete").click)
        check("Deleted notes.txt" in driver.find_element(By.ID, "deleted").text, "the deletion is reported")
        check(not notes.exists(), "the file is gone once the deletion has committed")
        shot(driver, "07-deleted")

        # Another process adds an image and leaves its jobs (metadata, thumbnail) queued: the next
        # load shows them.
        shutil.copy(ROOT / "TestAssets" / "demo" / "photos" / "blue.png", work / "queued.png")
        subprocess.run([tool, "add", "--catalog", str(catalog), "--queue-only", str(work / "queued.png")],
                       check=True, capture_output=True)
        driver.get(url.split("?")[0] + "jobs")
        check(driver.find_element(By.TAG_NAME, "h1").text == "Jobs", "the jobs page")
        check("<th>" not in driver.find_element(By.TAG_NAME, "body").text, "no markup shows as text")
        queued = driver.find_elements(By.CSS_SELECTOR, "#queued tbody tr")
        check(len(queued) == 2 and all("queued" in q.text for q in queued),
              f"the queued jobs are listed: {[q.text for q in queued]}")
        shot(driver, "08-jobs")

        # Back to the list: 8 assets; a GET of the deletion's address only asks.
        driver.get(url.split("?")[0])
        check(len(driver.find_elements(By.CSS_SELECTOR, "table.assets tbody tr")) == 8,
              "8 assets: 7 left and the one added meanwhile")
        shot(driver, "09-list-after")
        csp = [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]
        check(not csp, f"no CSP violations: {csp}")
    finally:
        if driver:
            driver.quit()
        server.send_signal(signal.SIGTERM)
        try:
            status = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            status = "still running after SIGTERM"
        check(status == 0, f"assetcat serve exits 0 on SIGTERM, not {status}: {server.stderr.read()}")
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.time() - started
    print(f"browser test: {elapsed:.1f} s; screenshots in {SHOTS}")
    print(f"{checks['passed']} passed, {checks['failed']} failed")
    return 1 if checks["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
