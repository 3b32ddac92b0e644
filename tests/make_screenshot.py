"""Take the README's screenshot of the real app on the shipped checkpoints.

    python tests/make_screenshot.py [--out tests/screenshots/app.png]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright  # noqa: E402

import app  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).parent / "screenshots" / "app.png"))
    parser.add_argument("--sentence", default="A little girl in a pink dress is climbing the stairs to a wooden house.")
    args = parser.parse_args()
    app.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(app.demo.local_url)
            page.fill("#source textarea", args.sentence)
            page.click("#translate")
            page.wait_for_function("() => document.querySelector('#translation textarea').value.length > 0")
            for _ in range(3):
                page.click("#next")
                page.wait_for_timeout(400)
            page.wait_for_selector("#attention .js-plotly-plot")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        app.demo.close()
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
