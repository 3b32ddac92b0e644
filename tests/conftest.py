"""Shared fixtures: tiny models and tiny Multi30k-like data that the tests make themselves."""

import fcntl
import gzip
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from attention_inspector.model.nets.transformer import ModelConfig, Transformer

torch.set_num_threads(1)


# Every test has a time limit (pytest-timeout), so that a regression that hangs fails with a traceback instead of
# stopping the run: the fast tests' limit is pyproject.toml's `timeout`, and a slow one gets SLOW_LIMIT unless it is
# marked with a limit of its own.
SLOW_LIMIT = 600  # seconds: a browser session, a study, a wheel installed into a fresh venv


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: trains, launches servers or browsers (skip with -m 'not slow'); "
                                       f"limited to {SLOW_LIMIT} s unless marked with a timeout of its own")
    # Warnings: the third-party ones we cannot fix are named here and ignored; one from our own code fails the test
    # (later lines win).
    for line in ("ignore::pandas.errors.Pandas4Warning:gradio",  # Gradio's queue on pandas 3, every queued event
                 "ignore:Recommended:UserWarning:transformers",  # Marian's tokenizer asks for sacremoses
                 r"error:::(attention_inspector|app|benchmarks|tests)(\.|$)"):
        config.addinivalue_line("filterwarnings", line)
    # The browser tests measure drawn text (labels inside a figure, a title on a phone's width): in the font Plotly's
    # default "Open Sans", verdana, arial resolves to, set here rather than left to whatever the machine has (DejaVu
    # Sans, where Arial is not aliased, is 14% wider): neither of the first two, and Arial's metrics.
    if shutil.which(CHROMIUM) and shutil.which("fc-match"):
        font = subprocess.run(["fc-match", "Arial"], capture_output=True, text=True).stdout
        earlier = [name for name in ("Open Sans", "Verdana")
                   if subprocess.run(["fc-list", name], capture_output=True, text=True).stdout.strip()]
        if "Liberation Sans" not in font or earlier:
            raise pytest.UsageError(f"the browser tests measure text in Liberation Sans (Arial's metrics), and Arial "
                                    f"is {font.strip()!r} here{' with ' + ', '.join(earlier) if earlier else ''}: "
                                    "install fonts-liberation (.ci/run does)")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_LIMIT))


SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"

# Tolerances for two computations of one float32 value that add their sums in other orders (a batch blocked
# otherwise than one row, another CPU's kernels, another process's share): derived from the arithmetic, never read
# off one machine's run (docs/testing.md, "Tolerances").
UNIT_ROUNDOFF = 2.0 ** -24  # float32's unit round-off u


def reordered(terms: int, sums: int = 1, scale: float = 1.0) -> float:
    """How far apart two float32 results may be when each of `sums` sums in sequence (a model's matrix products along
    the way to the result) adds its `terms` terms in another order: a sum of n terms is within (n − 1)·u·Σ|terms|
    of the exact one whatever the order (Higham, Accuracy and Stability of Numerical Algorithms, §4.2), so two orders
    are within 2·n·u of each other; the sums' errors add up, to first order. `scale` is Σ|terms| of a sum relative to
    the result compared (1: no cancellation)."""
    return 2 * terms * sums * UNIT_ROUNDOFF * scale


def roundings(config, length: int | None = None) -> int:
    """N: the float32 terms added in sequence on the way from a model's embeddings to one output probability (every
    sum's terms, each sum's result feeding the next), for sequences of up to `length` tokens (its max_len). A
    Transformer's encoder layer adds d (a projection) + d_head (a score) + length (the weighted values) + d (the
    output projection) + 2d (the norm's mean and variance) + d + d_ff (the feed-forward) + 2d; a decoder layer two
    such attention blocks and the feed-forward; then the memory's keys (d), the output layer (d) and the softmax's
    normaliser (the vocabulary). A GRU model adds a step's input and state (embedding + hidden) at every source and
    target step, and at each target step its attention (hidden + length) and output (2 hidden)."""
    if getattr(config, "architecture", "transformer") == "rnn":
        length = length or config.max_len
        e, h = config.embedding_dim, config.hidden_size
        return length * (e + h) + length * (e + h + h + length + 2 * h) + config.tgt_vocab_size
    length = length or config.max_len
    d, head, ff = config.d_model, config.d_head or config.d_model // config.n_heads, config.d_ff
    attention = d + head + length + d + 2 * d
    return (config.n_encoder_layers * (attention + d + ff + 2 * d)
            + config.n_decoder_layers * (2 * attention + d + ff + 2 * d) + 3 * d + config.tgt_vocab_size)


def model_rounding(config, scale: float = 1.0, length: int | None = None, spread: float = 6.0) -> float:
    """How far apart two float32 computations of one of a model's outputs may be when their sums are added in other
    orders, for values of size `scale` (1: the softmax's probabilities and weights, the normed stream). The worst
    case, 2·N·u for N = `roundings` terms in sequence, is never reached: rounding errors are independent and as
    often up as down, and Higham & Mary's probabilistic bound (A New Approach to Probabilistic Rounding Error
    Analysis, SIAM J. Sci. Comput. 41(5), 2019) puts each computation within λ·√N·u with probability at least
    1 − 2N·exp(−λ²/2): λ = `spread` = 6 gives 1 − 3e-8·N (0.999 for en-de's 25,561, 0.998 for the toy GRU's 40,977
    at its full length), and far more in practice (their bound is itself pessimistic)."""
    return 2 * spread * roundings(config, length) ** 0.5 * UNIT_ROUNDOFF * scale


def largest_logit(translator, text: str) -> float:
    """The largest |logit| of the teacher-forced pass over `translator`'s translation of `text`."""
    traced = translator.trace(text).trace
    with torch.no_grad():
        logits, _ = translator.model(torch.tensor([traced.src_ids]), torch.tensor([traced.decoder_input_ids]))
    return float(logits.abs().max())


def log_probability_rounding(translator, text: str) -> float:
    """`model_rounding` for a log-probability of `translator`'s translation of `text`: log p = z − log Σ exp z moves
    by at most twice the largest error of its logits z, each within the rounding of values of their size (the
    largest |z| of the translation's teacher-forced pass)."""
    return 2 * model_rounding(translator.model.config, scale=largest_logit(translator, text))


def decoded_log_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over the last dimension of `logits`, <pad> and <sos> ruled out as decoding rules them out."""
    from attention_inspector.model.text.vocab import PAD_ID, SOS_ID

    logits = logits.float().clone()
    logits[..., [PAD_ID, SOS_ID]] = float("-inf")
    return logits.log_softmax(-1)


# T5's switches (model/hub/convert_hf.py): relative positions, RMSNorm, gated GELU, heads narrower than d_model / heads.
T5_LIKE = dict(positional="relative", norm="pre", normalization="rms", gated_feed_forward=True, activation="gelu_tanh",
               d_head=6, relative_buckets=8, relative_max_distance=16, scale_embeddings=False)


def tiny_config(**overrides) -> ModelConfig:
    """A model small enough to build and run in milliseconds."""
    settings = dict(src_vocab_size=23, tgt_vocab_size=29, d_model=32, n_heads=4, n_encoder_layers=2,
                    n_decoder_layers=2, d_ff=64, dropout=0.0, max_len=64)
    settings.update(overrides)
    return ModelConfig(**settings)


@pytest.fixture
def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config()).eval()


WORDS = {"a": "ein", "man": "Mann", "dog": "Hund", "runs": "läuft", "in": "im", "park": "Park",
         "woman": "Frau", "red": "roter", "ball": "Ball", "plays": "spielt", "with": "mit", "child": "Kind"}


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def write_parallel(folder, sizes=(("train", 300), ("val", 30), ("test_2016_flickr", 30)), gz=True):
    """Write a word-for-word toy 'Multi30k' (en/de) in the raw file layout."""
    rng = random.Random(0)
    for split, n in sizes:
        english, german = [], []
        for _ in range(n):
            words = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 7))]
            english.append(sentence_case(" ".join(words)))
            german.append(sentence_case(" ".join(WORDS[w] for w in words)))
        for lang, lines in (("en", english), ("de", german)):
            text = "\n".join(lines) + "\n"
            if gz:
                with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.write(text)
            else:
                (folder / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def toy_data(tmp_path):
    folder = tmp_path / "multi30k"
    folder.mkdir()
    return write_parallel(folder)


@pytest.fixture(scope="session")
def toy_checkpoints(tmp_path_factory):
    """A checkpoint folder with toy en->de Transformer and RNN checkpoints trained here and one broken
    folder; returns (checkpoint folder, the toy data they were trained on)."""
    kept = os.environ.get("TOY_CHECKPOINTS")  # a folder to train them into once, for many runs (benchmarks/mutation.py)
    if not kept:
        return train_toys(tmp_path_factory.mktemp("checkpoints"), tmp_path_factory.mktemp("multi30k"),
                          tmp_path_factory)
    Path(kept).mkdir(parents=True, exist_ok=True)
    with open(Path(kept) / "lock", "w") as lock:  # runs at once wait for the first to train them
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (Path(kept) / "trained").is_file():
            for folder in ("checkpoints", "multi30k"):
                (Path(kept) / folder).mkdir(exist_ok=True)
            train_toys(Path(kept) / "checkpoints", Path(kept) / "multi30k", tmp_path_factory)
            (Path(kept) / "trained").touch()
    return Path(kept) / "checkpoints", Path(kept) / "multi30k"


def train_toys(root: Path, data_folder: Path, tmp_path_factory) -> tuple[Path, Path]:
    """`toy_checkpoints` trained into `root` on data written into `data_folder`."""
    from attention_inspector.model.training import train

    # Enough data and updates that the toy really learns its word-for-word task (val BLEU ~95 for every seed
    # tried); with fewer, what it outputs depended on the CPU's floating-point rounding.
    data = write_parallel(data_folder, sizes=(("train", 2000), ("val", 30), ("test_2016_flickr", 30)))
    train.main(["--data", str(data), "--out", str(root / "toy-en-de"), "--work", str(tmp_path_factory.mktemp("work")),
                "--epochs", "6", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--encoder-layers", "2",
                "--decoder-layers", "2", "--max-tokens", "400", "--warmup", "20", "--lr", "3e-3", "--decay", "linear",
                "--min-freq", "1", "--threads", "1", "--dropout", "0"])
    train.main(["--data", str(data), "--out", str(root / "toy-rnn"), "--work", str(tmp_path_factory.mktemp("rnn")),
                "--architecture", "rnn", "--epochs", "2", "--hidden-size", "32", "--embedding-dim", "16",
                "--heads", "2", "--min-freq", "1", "--threads", "1", "--max-tokens", "600", "--constant-lr",
                "--warmup", "5", "--lr", "3e-3"])
    (root / "broken").mkdir()
    (root / "broken" / "config.json").write_text("{ not json", encoding="utf-8")
    return root, data


@pytest.fixture(scope="session")
def translators_of_each_kind(toy_checkpoints, tmp_path_factory):
    """The toy Transformer, the toy GRU model and a tiny converted flan-t5-like model (pre-norm, relative
    positions, gated feed-forward), by kind."""
    from attention_inspector.model.hub.convert_hf import convert
    from attention_inspector.model.serving.checkpoint import load_checkpoint
    from tests import hub_models

    root, hub = toy_checkpoints[0], tmp_path_factory.mktemp("hub")
    t5 = convert(str(hub_models.t5(hub / "t5", gated=True)), hub / "converted")
    return {"transformer": load_checkpoint(root / "toy-en-de"), "rnn": load_checkpoint(root / "toy-rnn"),
            "t5-like": load_checkpoint(t5)}


@pytest.fixture(scope="session")
def services(toy_checkpoints):
    """The toy checkpoints loaded as the app loads them, with forked trace workers."""
    from attention_inspector.ui import load_services

    loaded = load_services(toy_checkpoints[0])
    yield loaded
    loaded.close()


@pytest.fixture(scope="session")
def demo(services):
    """The app's page for the toy checkpoints (`demo.page` names its components)."""
    from attention_inspector.ui import build_demo

    return build_demo(services)


@pytest.fixture(scope="session")
def server(demo, services):
    """The app launched on a free loopback port; yields its URL."""
    from attention_inspector.ui import launch_options

    demo.launch(server_name="127.0.0.1", server_port=None, prevent_thread_lock=True, quiet=True,
                **launch_options(services))
    yield demo.local_url
    demo.close()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-quic", "--disable-sync"]


@pytest.fixture(scope="module")
def page(server):
    """A headless Debian chromium page (driven by Playwright) on the launched app."""
    if not shutil.which(CHROMIUM) and not os.environ.get("CI"):
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 2200})
        page.goto(server)
        yield page
        browser.close()


VIEW = ("cross", 1, "mean", "weights", 1, False, "pieces")  # kind, layer, head, measure, step, model view, units


class Events:
    """The page's events run as Gradio runs them, without a server: an operation on a session, then `render`;
    answers come keyed by the component's name on the page (`translation`, `mask_grids[2]`, ...)."""

    def __init__(self, demo, services):
        self.page, self.services = demo.page, services
        self.names = {}
        for name, value in vars(self.page).items():
            for index, component in enumerate(value if isinstance(value, list) else [value]):
                self.names[id(component)] = f"{name}[{index}]" if isinstance(value, list) else name

    def named(self, updates: dict) -> dict:
        """Answers by name; the core view's one value (ui/plots.py `core_view`) as its parts' names (`translation`,
        `status`, `attention`, `candidates`, `step_text` as JSON)."""
        named = {self.names[id(component)]: value for component, value in updates.items()
                 if component is not self.page.core}
        if self.page.core in updates:
            core = json.loads(updates[self.page.core])
            for part in self.page.parts:
                if part.name in core:
                    value = core[part.name]
                    named[self.names[id(part)]] = json.dumps(value) if part is self.page.step_text and value else value
        return named

    def run(self, operation, session, *extras, view=VIEW, outputs=None, writes=True) -> dict:
        """`operation(services, session, *extras)` as an event with the page's view settings `view` (`writes`: it
        makes a new state, as all but view changes do)."""
        from attention_inspector.ui import listeners

        answer = listeners.answer(self.page, self.services, operation,
                                  outputs or listeners.session_outputs(self.page), len(extras), writes=writes)
        return self.named(answer(session, *extras, *view))

    def translate(self, text, model="toy-en-de", session=None, view=VIEW) -> dict:
        from attention_inspector.ui import operations

        return self.run(operations.translate, session, model, text, view=view)

    def view(self, session, *view) -> dict:
        """A view change (kind, layer, head, measure, step, model view) of the stored session."""
        from attention_inspector.ui import listeners

        return self.run(listeners.view_changed, session, view=view, outputs=listeners.view_outputs(self.page),
                        writes=False)


@pytest.fixture(scope="session")
def events(demo, services) -> Events:
    return Events(demo, services)
