"Shared fixtures: paths of the repository and of the built site."
import contextlib
import functools
import http.server
import importlib
import os
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "_docs"


@pytest.fixture(autouse=True)
def _close_figures():
    "Every test starts with no matplotlib figure open: close what the test before it left"
    yield
    if "matplotlib.pyplot" in sys.modules: sys.modules["matplotlib.pyplot"].close("all")


def wait_for_site_build(status: Path, timeout: float = 900) -> None:
    """`make test` builds the site's pages beside pytest; the file TNB_SITE_STATUS names
    appears, holding the build's exit status, when it ends. Wait for it; fail if it failed."""
    import time
    t0 = time.monotonic()
    while not status.exists():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"the site build did not end within {timeout:.0f} s ({status} missing)")
        time.sleep(0.5)
    rc = status.read_text().strip()
    if rc != "0":
        pytest.fail(f"the site build failed with exit status {rc}: see .build/site.log")


@pytest.fixture(scope="session")
def docs() -> Path:
    """The built site. Without it, the site tests are skipped, unless TNB_REQUIRE_SITE=1
    (set by `make test`): then they fail. `make test` builds the site beside the tests
    and sets TNB_SITE_STATUS: the tests wait for the build to end."""
    if os.environ.get("TNB_SITE_STATUS"):
        wait_for_site_build(Path(os.environ["TNB_SITE_STATUS"]))
    if not (DOCS / "index.html").exists():
        msg = "_docs/index.html is missing: build the site first with `make site`"
        if os.environ.get("TNB_REQUIRE_SITE") == "1":
            pytest.fail(msg + " (TNB_REQUIRE_SITE=1)")
        pytest.skip(msg)
    return DOCS


def chapter_pages() -> list[str]:
    "The chapter pages, in the sidebar's reading order (pages of nbs/sidebar.yml under 'Chapters')."
    import re

    import yaml
    side = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())
    pages = []
    def walk(items, in_chapters=False):
        for it in items:
            if isinstance(it, dict):
                walk(it.get("contents", []), in_chapters or it.get("section") == "Chapters")
            elif in_chapters:
                pages.append(re.sub(r"^\d+[a-zA-Z0-9]*_", "", Path(it).stem) + ".html")
    walk(side["website"]["sidebar"]["contents"])
    return pages


def all_pages() -> list[str]:
    "Every notebook's page name, as nbdev's doc links name them."
    import re
    return sorted(re.sub(r"^\d+[a-zA-Z0-9]*_", "", p.stem) + ".html" for p in (ROOT / "nbs").glob("*.ipynb"))


@contextlib.contextmanager
def benchmark_script(name: str):
    "A script of benchmarks/ as a module (its settings and functions, without running it)"
    folder = str(ROOT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module(name)
    finally: sys.path.remove(folder)


def pad_mask(lengths, n):
    "(B, 1, 1, n) padding mask of sequences of these lengths padded to n, built by the package: True = a real key"
    import torch

    from transformer_nb.masking import padding_mask
    ids = (torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]).long()   # 1 = a token, 0 = padding
    return padding_mask(ids, 0)


def all_close(diffs: dict, tol: float = 1e-5) -> bool:
    "Every difference `compare_modules` reports is below tol (a NaN is not)"
    return all(d < tol for d in diffs.values())


def serve(directory):
    "A quiet HTTP server on a free localhost port; returns (server, base url)"
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args): pass
    handler = functools.partial(Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def bench_result(scale: float) -> dict:
    """A benchmark result of made-up timings (tests of the benchmark's ratios and figures): every tokens/s of the
    fast path scaled by `scale`"""
    impl = lambda t: {"tokens_per_s": t, "median": 1.0, "peak_mb": 10.0}
    train = {f"T=32, dropout {p}": {"readable": impl(100), "fast": impl(100 * scale), "torch": impl(100),
                                    "flops": 1e9} for p in (0.1, 0.0)}
    return {"train": train, "matmul_peak": 1e10, "forward_base": {k: impl(50) for k in ("readable", "fast", "torch")},
            "decoding": {"cached": impl(40 * scale), "uncached": impl(10)},
            "bf16": {"T=32, dropout 0.1": {"float32": impl(100), "bfloat16": impl(10 * scale)}}}


def stack_encoder(to_base=lambda norm_first, final_norm: (norm_first, final_norm)):
    """An encoder built on the book's _Stack whose base class gets `to_base(norm_first, final_norm)`: a learner's
    stack that passes its settings on (the default) or loses one on the way"""
    from transformer_nb.layers import EncoderLayer, _Stack

    class Enc(_Stack):
        def __init__(self, d_model, num_heads, d_ff, num_layers=6, dropout=0.1, norm_first=True,
                     activation="relu", final_norm=None):
            super().__init__([EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation)
                              for _ in range(num_layers)], *to_base(norm_first, final_norm))

        def forward(self, x, src_mask=None, need_weights=False):
            x, ws = self._run(x, src_mask=src_mask, need_weights=need_weights)
            return (x, ws[0]) if need_weights else x
    return Enc


def small_gpt(**kw):
    "A one-layer GPT (vocabulary 17, d_model 32, 4 heads, max_len 16), seeded; keywords change or add GPT's settings"
    import torch

    from transformer_nb.gpt import GPT
    torch.manual_seed(0)
    return GPT(**dict(dict(vocab_size=17, d_model=32, num_heads=4, d_ff=64, num_layers=1, max_len=16), **kw))


def small_transformer():
    "A one-layer encoder-decoder Transformer (vocabulary 14, d_model 16), seeded, without dropout, in eval mode"
    import torch

    from transformer_nb.transformer import Transformer
    torch.manual_seed(0)
    return Transformer(14, 14, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                       max_len=32, dropout=0.0).eval()
