"""Take the README's screenshots of the real app on the shipped checkpoints: a desktop and a phone screen.

    python tests/make_screenshot.py [--out tests/screenshots] [--only app.png app-phone.png]

Each is what the screen shows (1400x900 at the top of the page, 390x844 scrolled to the step bar), a translation
stepped to step 4. Then the neuron view of step 4's heaviest key beside the heatmap (`--only neuron.png` takes it
alone); then one desktop screenshot per what-if view, scrolled to it: a branch (the second candidate at step 4, beside the
original), three cross-attention heads of layer 2 switched off, the beam, where each word came from, and the
cross-attention view of layer 3 showing ALTI+ contributions, rollout and (all heads) weight × value norm instead
of weights, then integrated gradients of every step in words at the last step; last, a shared link that opens the two EN→FR GRU models compared at step 4 (a sentence they translate alike, so
the difference map shows); and a link that opens the Counterfactual tab, every head patched. `--only` takes only the
main screenshots it names, none of the what-if ones.
"""

import argparse
import sys
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import sync_playwright  # noqa: E402

import attention_inspector.ui as ui  # noqa: E402
from tests.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.pages import heatmap_cell, open_tab  # noqa: E402

SCREENS = {"app.png": dict(viewport={"width": 1400, "height": 900}),
           "app-phone.png": dict(viewport={"width": 390, "height": 844}, is_mobile=True, device_scale_factor=2)}


def status_starts(page, prefix: str) -> None:
    page.wait_for_function("(prefix) => document.querySelector('#status textarea')?.value.startsWith(prefix)",
                           arg=prefix, timeout=60000)


def save(page, out: Path, name: str, top: str) -> None:
    """The screen scrolled so that `top` (a selector) is at its top."""
    page.wait_for_timeout(800)
    page.evaluate("(top) => window.scrollTo(0, window.scrollY + document.querySelector(top).getBoundingClientRect()"
                  ".top - 8)", top)
    page.wait_for_timeout(300)
    page.evaluate("() => document.querySelector('#status-bar')?.click()")  # read: the status shown again goes
    page.screenshot(path=str(out / name))
    print(f"saved {out / name}")


def choose(page, elem_id: str, option: str) -> None:
    page.click(f"#{elem_id} input")
    page.get_by_role("option", name=option, exact=True).click()
    page.wait_for_function("() => !document.querySelector('[role=listbox]')", timeout=15000)  # the menu has closed


def what_if(page, out: Path) -> None:
    """A branch, heads switched off and the beam, each as a screenshot of its tab."""
    page.locator("#candidates").scroll_into_view_if_needed()
    bar = page.locator("#candidates .js-plotly-plot .bars .point path").nth(1).bounding_box()
    page.mouse.move(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2 - 20)
    page.mouse.down()
    page.mouse.up()
    status_starts(page, "Branch")
    open_tab(page, "Branch and compare")
    save(page, out, "branch.png", "#what-if")
    page.get_by_label("greedy translation").check()
    status_starts(page, "Showing the greedy translation")
    open_tab(page, "Switch heads off")
    for head in ("L2 H1", "L2 H3", "L2 H5"):
        page.locator("#mask-cross label", has_text=head).click()
        page.wait_for_timeout(1500)
    status_starts(page, "3 heads off")
    save(page, out, "heads.png", "#what-if")
    page.click("#mask-reset")
    status_starts(page, "All heads")
    open_tab(page, "Beam search")
    page.click("#beam")
    status_starts(page, "Beam search")
    save(page, out, "beam.png", "#what-if")
    open_tab(page, "Where each word came from")
    page.click("#contributions")
    status_starts(page, "Contributions")
    save(page, out, "sources.png", "#what-if")
    choose(page, "kind", "Cross-attention")
    page.wait_for_timeout(1000)
    choose(page, "measure", "contributions (ALTI+)")
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".includes('ALTI+')", timeout=60000)
    page.click("#layer input")  # the last layer: the shares that reach the output
    page.get_by_role("option", name="Layer 3", exact=True).click()
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".includes('layer 3')", timeout=60000)
    save(page, out, "measure.png", "#step-bar")
    choose(page, "measure", "rollout")
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".includes('rollout')", timeout=60000)
    save(page, out, "rollout.png", "#step-bar")
    choose(page, "measure", "weight × value norm")
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".includes('value norm')", timeout=60000)
    page.click("#head input")
    page.get_by_role("option", name="All heads", exact=True).click()
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".includes('all 8 heads')", timeout=60000)
    save(page, out, "value-norm.png", "#step-bar")
    gradients(page, out)


def gradients(page, out: Path) -> None:
    """Integrated gradients of every step over the source, in words, at the last step."""
    choose(page, "measure", "integrated gradients")
    page.wait_for_function("() => document.querySelector('#attention .js-plotly-plot')?.layout.title.text"
                           ".startsWith('Attribution of each step')", timeout=60000)
    page.click("#units input[value=words]")
    page.click("#last")
    page.wait_for_function("""() => {  // in words, at the last step: its word, then the step's piece
        const title = document.querySelector('#attention .js-plotly-plot')?.layout.title.text || '';
        const step = document.querySelector('#step input[type=number]').value;
        return title.includes('<br>word ') && title.includes(`<br>step ${step} of ${step}:`); }""", timeout=60000)
    save(page, out, "gradients.png", "#step-bar")


def neuron(page, out: Path) -> None:
    """The neuron view beside the heatmap: the cell of step 4's heaviest key clicked (brought into view by
    `heatmap_cell`), on the head the page opens on."""
    column = page.evaluate("""() => {
        const row = document.querySelector('#attention .js-plotly-plot').data[0].z[3];
        return row.indexOf(Math.max(...row));
    }""")
    page.mouse.click(*heatmap_cell(page, 3, column))
    page.wait_for_function("() => document.querySelector('#neuron .js-plotly-plot')", timeout=60000)
    save(page, out, "neuron.png", "#step-bar")


def compare(page, out: Path, url: str) -> None:
    """A link that compares the two EN→FR GRU models (dot-product and multi-head cross-attention) at step 4."""
    query = urlencode({"model": "en-fr-rnn-multihead", "compare": "en-fr-rnn-dot", "step": 4,
                       "text": "A woman holding a bowl of food in a kitchen."})
    page.goto(f"{url}?{query}")
    status_starts(page, "Opened the link")
    open_tab(page, "Compare models")
    page.wait_for_function("() => document.querySelector('#compare-plot .js-plotly-plot')?.layout?.title.text"
                           ".includes('step 4 of')", timeout=60000)
    save(page, out, "compare.png", "#what-if")


def counterfactual(page, out: Path, url: str) -> None:
    """A link that opens the Counterfactual tab with "man" swapped for "woman", every head patched at step 1 (the
    German article, "ein" against "eine")."""
    query = urlencode({"model": "en-de", "text": "A man is riding a bicycle down the street.", "step": 1,
                       "counterfactual": "A woman is riding a bicycle down the street."})
    page.goto(f"{url}?{query}")
    status_starts(page, "Opened the link")
    page.click("#patch")
    page.wait_for_function("() => document.querySelector('#patching-stream .js-plotly-plot')", timeout=60000)
    save(page, out, "counterfactual.png", "#counterfactual-answers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).parent / "screenshots"))
    parser.add_argument("--sentence", default="A little girl in a pink dress is climbing the stairs to a wooden house.")
    parser.add_argument("--only", nargs="+", choices=[*SCREENS, "neuron.png"], metavar="NAME",
                        help=f"only these of the main screenshots ({', '.join(SCREENS)}), none of the what-if ones; "
                             "neuron.png: only the neuron view (taken on the desktop screen)")
    args = parser.parse_args()
    services = ui.load_services(Path(__file__).resolve().parent.parent / "checkpoints")
    demo = ui.build_demo(services)
    demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **ui.launch_options(services))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            for name, screen in SCREENS.items():
                if args.only and name not in args.only and not (name == "app.png" and "neuron.png" in args.only):
                    continue
                page = browser.new_page(**screen)
                page.goto(demo.local_url)
                page.wait_for_function("() => document.querySelector('#status textarea')?.value.startsWith('Translated')",
                                       timeout=60000)
                example = page.input_value("#translation textarea")  # the first visit's translated example
                page.fill("#source textarea", args.sentence)
                page.click("#translate")
                page.wait_for_function("(before) => document.querySelector('#translation textarea').value.length > 0"
                                       " && document.querySelector('#status textarea').value.startsWith('Translated')"
                                       " && document.querySelector('#translation textarea').value !== before",
                                       arg=example, timeout=60000)
                page.wait_for_function("() => document.querySelector('#detachment .detachment-verdict')?.textContent",
                                       timeout=60000)  # the line under the translation: does it rest on its source?
                page.fill("#step input[type=number]", "4")
                page.press("#step input[type=number]", "Enter")
                if screen["viewport"]["width"] < 600:  # on a phone, the step bar and the heatmap fill the screen
                    page.locator("#step-bar").scroll_into_view_if_needed()
                    page.evaluate("() => window.scrollBy(0, document.querySelector('#step-bar').getBoundingClientRect().top - 8)")
                page.wait_for_timeout(500)
                Path(args.out).mkdir(parents=True, exist_ok=True)
                if not args.only or name in args.only:
                    page.screenshot(path=str(Path(args.out) / name))
                    print(f"saved {Path(args.out) / name}")
                if screen["viewport"]["width"] >= 600 and (not args.only or "neuron.png" in args.only):
                    neuron(page, Path(args.out))
                if screen["viewport"]["width"] >= 600 and not args.only:
                    page.click("#neuron .neuron-close")
                    what_if(page, Path(args.out))
                    compare(page, Path(args.out), demo.local_url)
                    counterfactual(page, Path(args.out), demo.local_url)
            browser.close()
    finally:
        demo.close()


if __name__ == "__main__":
    main()
