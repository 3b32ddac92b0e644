"""What each attention head does, in numbers: per head, over the queries of one sentence (model/analysis/heads.py
averages them over a split).

- entropy: mean over queries of −Σ_k α_k log α_k (nats): low for a head that looks at one token;
- confidence: mean over queries of the largest weight (Voita et al., 2019);
- <eos> weight and punctuation weight: mean weight on those keys, where heads often park attention (sinks);
- offset: mean over queries of (position of the most attended key − query position), for self-attention:
  −1 for a head that looks at the previous token, +1 at the next (Voita et al.'s positional heads).

Pure numpy on attention maps (L, H, Q, K) and their key tokens; no model needed.
"""

from __future__ import annotations

import unicodedata

import numpy as np

STATISTICS = {  # name -> what it is, for tables and colour bars
    "entropy": "mean entropy of a query's weights (nats)",
    "confidence": "mean largest weight (Voita et al. 2019)",
    "eos_weight": "mean weight on <eos>",
    "punctuation_weight": "mean weight on punctuation",
    "offset": "mean offset of the most attended key (self-attention)",
}


def is_punctuation(token: str) -> bool:
    """A token made of punctuation characters only (".", ",", "!?", "–")."""
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def head_statistics(maps: np.ndarray, key_tokens: list[str], self_attention: bool) -> dict[str, np.ndarray]:
    """Each statistic as an (L, H) array from attention maps (L, H, Q, K) over `key_tokens`; for a self-attention
    map, query q is key position q (for cross-attention, `offset` is NaN: queries and keys are different texts)."""
    maps = np.asarray(maps, dtype=np.float64)
    entropy = -(maps * np.log(np.clip(maps, 1e-12, None))).sum(-1)  # (L, H, Q)
    eos = np.array([token == "<eos>" for token in key_tokens])
    punctuation = np.array([is_punctuation(token) for token in key_tokens])
    statistics = {"entropy": entropy.mean(-1), "confidence": maps.max(-1).mean(-1),
                  "eos_weight": maps[..., eos].sum(-1).mean(-1),
                  "punctuation_weight": maps[..., punctuation].sum(-1).mean(-1)}
    if self_attention:
        queries = np.arange(maps.shape[-2])
        statistics["offset"] = (maps.argmax(-1) - queries).mean(-1)
    else:
        statistics["offset"] = np.full(maps.shape[:2], np.nan)
    return statistics


def best_aligning_head(report: dict) -> tuple[int, int] | None:
    """The cross-attention head (layer, head; 0-based) with the lowest alignment error rate in a heads.json report,
    or None when it has none."""
    scored = [(values["alignment_aer"], name) for name, values in report.get("heads", {}).items()
              if name.startswith("cross.") and isinstance(values.get("alignment_aer"), (int, float))]
    if not scored:
        return None
    _, name = min(scored)
    _, layer, head = name.split(".")
    return int(layer) - 1, int(head) - 1
