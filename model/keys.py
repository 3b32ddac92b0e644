"""The keys that the API, the links, the model code and the UI's menus all speak, defined once.

Values are keys; labels are for people. A menu offers `(label, key)` pairs, so rewording a label never
changes what a client sends. Heads are named `kind.layer.head`, 1-based: "cross.2.5".
"""

from __future__ import annotations

# Attention kinds.
ENCODER, DECODER, CROSS = "encoder", "decoder", "cross"
KINDS = (ENCODER, DECODER, CROSS)
KIND_LABELS = {ENCODER: "Encoder self-attention", DECODER: "Decoder self-attention", CROSS: "Cross-attention"}

# What a view shows of one layer besides a single head.
MEAN, ALL_HEADS = "mean", "all"
HEAD_LABELS = {MEAN: "Mean of heads", ALL_HEADS: "All heads"}

# What an attention view can show: the weights, a measure computed from the same pass through the residual stream
# (model/explain/contributions.py: a Transformer's only), or gradient attributions of each step's prediction
# (model/explain/attribution.py): a measure of the whole model, to the source tokens (shown as cross-attention) and
# to the target prefix (as decoder self-attention).
WEIGHTS, VALUE_NORM, ROLLOUT, ALTI = "weights", "value_norm", "rollout", "alti"
RESIDUAL_MEASURES = (VALUE_NORM, ROLLOUT, ALTI)
SALIENCY, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS = "saliency", "input_x_gradient", "integrated_gradients"
GRADIENTS = (SALIENCY, INPUT_X_GRADIENT, INTEGRATED_GRADIENTS)
MEASURES = (WEIGHTS, *RESIDUAL_MEASURES, *GRADIENTS)
MEASURE_LABELS = {WEIGHTS: "weights", VALUE_NORM: "weight × value norm", ROLLOUT: "rollout",
                  ALTI: "contributions (ALTI+)", SALIENCY: "saliency (gradient)", INPUT_X_GRADIENT: "input × gradient",
                  INTEGRATED_GRADIENTS: "integrated gradients"}

# Where a word alignment is read from cross-attention: at the step that outputs the word, or where it is the
# decoder's input (shift-att).
OUTPUT, INPUT = "output", "input"
READINGS = (OUTPUT, INPUT)


def head_name(kind: str, layer: int, head: int) -> str:
    """The public name of a head: its kind key, 1-based layer and head, e.g. "cross.2.5"."""
    return f"{kind}.{layer + 1}.{head + 1}"


def parse_head_name(name: object) -> tuple[str, int, int] | None:
    """(kind key, 0-based layer, 0-based head) of a head's name, or None if it is no such name."""
    parts = name.strip().lower().split(".") if isinstance(name, str) else []
    if len(parts) != 3 or parts[0] not in KINDS or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]) - 1, int(parts[2]) - 1


def choices(labels: dict[str, str], keys=None) -> list[tuple[str, str]]:
    """A menu's `(label, key)` entries, for `keys` (default: every key of `labels`, in order)."""
    return [(labels[key], key) for key in (labels if keys is None else keys)]

