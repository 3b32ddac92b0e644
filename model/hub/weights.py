"""A Hub model's weights read (mapped from model.safetensors, or pytorch_model.bin through the restricted unpickler)
and named as our `Transformer` names them, with its config turned into ours, family by family.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from attention_inspector.model.hub.hub_checks import ConversionError
from attention_inspector.model.nets.transformer import ModelConfig
from attention_inspector.model.serving.checkpoint import CheckpointError, read_rows, read_weights

ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}


class HubWeights(dict):
    """A Hub model's tensors by name (mapped from model.safetensors, or unpickled from pytorch_model.bin), which
    reads a token table's rows in our order straight from the file: through the map, the table's pages would stay
    counted against the process beside the renumbered copy (NLLB's table is 1 GB)."""

    def __init__(self, tensors: dict[str, torch.Tensor], path: Path | None = None):
        super().__init__(tensors)
        self.path = path

    def rows(self, name: str, order: list[int]) -> torch.Tensor:
        """The rows `order` of the table `name` (a KeyError where the weights lack it)."""
        if name not in self:
            raise KeyError(name)
        if self.path is None:
            return self[name][torch.tensor(order)]
        return read_rows(self.path, name, order)


def hub_weights(folder: Path) -> HubWeights:
    """The weights of `folder`: model.safetensors, or pytorch_model.bin through the restricted unpickler only."""
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safetensors.is_file():
        try:
            return HubWeights(read_weights(safetensors, mapped=True), safetensors)
        except CheckpointError as error:
            raise ConversionError(str(error)) from None
    if pickled.is_file():
        try:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as error:  # the restricted unpickler's refusals come as several exception types
            raise ConversionError(f"{pickled} was refused by the restricted unpickler (weights_only=True), which "
                                  f"admits only tensors and plain containers: {str(error).splitlines()[0]}") from None
        if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
            raise ConversionError(f"{pickled} does not hold a state dict of tensors.")
        return HubWeights(state)
    raise ConversionError(f"{folder} has neither model.safetensors nor pytorch_model.bin.")


def model_config(config: dict, vocab_size: int) -> ModelConfig:
    """Our config of a Hub config (`vocab_size`: ours, one more than the Hub model's)."""
    family = config["model_type"]
    if family == "t5":
        return t5_config(config, vocab_size)
    activation = config.get("activation_function", "relu")
    if activation not in ACTIVATIONS:
        raise ConversionError(f"activation {activation!r} is not one the Transformer here has.")
    if config["encoder_attention_heads"] != config["decoder_attention_heads"] or \
            config["encoder_ffn_dim"] != config["decoder_ffn_dim"]:
        raise ConversionError("Encoder and decoder with different head counts or widths are not handled.")
    positional = {"marian": "sinusoidal_halves", "m2m_100": "fairseq", "mbart": "learned"}[family]
    return ModelConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=config["d_model"],
        n_heads=config["encoder_attention_heads"], n_encoder_layers=config["encoder_layers"],
        n_decoder_layers=config["decoder_layers"], d_ff=config["encoder_ffn_dim"], dropout=0.0,
        max_len=config["max_position_embeddings"], positional=positional,
        norm="post" if family == "marian" else "pre", tie_embeddings=config.get("tie_word_embeddings", True),
        activation=ACTIVATIONS[activation], scale_embeddings=bool(config.get("scale_embedding", family != "mbart")),
        embedding_norm=family == "mbart", share_embeddings=config.get("share_encoder_decoder_embeddings", True))


def t5_config(config: dict, vocab_size: int) -> ModelConfig:
    """Our config of a T5 config.json."""
    projection = config.get("feed_forward_proj", "relu")
    gated, _, activation = projection.rpartition("-")
    # transformers reads "gated-gelu" as the tanh approximation ("gelu_new"), as T5 v1.1 was trained
    activation = "gelu_tanh" if projection == "gated-gelu" or activation == "gelu_new" else activation
    if gated not in ("", "gated") or activation not in ("relu", "gelu", "gelu_tanh", "silu"):
        raise ConversionError(f"feed_forward_proj {config.get('feed_forward_proj')!r} is not one the Transformer "
                              "here has.")
    return ModelConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=config["d_model"], n_heads=config["num_heads"],
        d_head=config["d_kv"], n_encoder_layers=config["num_layers"],
        n_decoder_layers=config.get("num_decoder_layers") or config["num_layers"], d_ff=config["d_ff"], dropout=0.0,
        max_len=config.get("n_positions", 512), positional="relative", norm="pre", normalization="rms",
        norm_eps=config.get("layer_norm_epsilon", 1e-6), activation=activation, gated_feed_forward=gated == "gated",
        scale_embeddings=False, share_embeddings=True, tie_embeddings=True,  # untied below if lm_head differs
        relative_buckets=config.get("relative_attention_num_buckets", 32),
        relative_max_distance=config.get("relative_attention_max_distance", 128),
        folded_query_scale=math.sqrt(config["d_kv"]))


def t5_state_dict(hub_state: HubWeights, config: ModelConfig, hub_config: dict, order: list[int]
                  ) -> dict[str, torch.Tensor]:
    """Our weights from T5's: √d_head folded into W_Q (T5 does not scale scores), the output scale d_model^-0.5 of a
    tied model folded into the decoder's final norm, zeros for the biases T5 has not."""
    ours = {"src_embedding.tokens.weight": hub_state.rows("shared.weight", order),
            "generator.bias": torch.zeros(len(order))}
    head = hub_state.get("lm_head.weight")
    if head is not None and not torch.equal(head, hub_state["shared.weight"]):
        ours["generator.weight"] = hub_state.rows("lm_head.weight", order)
    scaled = hub_config.get("scale_decoder_outputs", hub_config.get("tie_word_embeddings", True) is not False)
    for side, blocks, sublayers in (
            ("encoder", config.n_encoder_layers, [("SelfAttention", "self_attention", "attention_block")]),
            ("decoder", config.n_decoder_layers, [("SelfAttention", "self_attention", "self_attention_block"),
                                                  ("EncDecAttention", "cross_attention", "cross_attention_block")])):
        ours[f"{side}_position_bias.table.weight"] = \
            hub_state[f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        final = hub_state[f"{side}.final_layer_norm.weight"]
        ours[f"{side}_norm.weight"] = final * config.d_model ** -0.5 if side == "decoder" and scaled else final
        for i in range(blocks):
            hub, our = f"{side}.block.{i}.layer", f"{side}_layers.{i}"
            for index, (hub_attention, our_attention, block) in enumerate(sublayers):
                for hub_projection, our_projection in (("q", "w_q"), ("k", "w_k"), ("v", "w_v"), ("o", "w_o")):
                    weight = hub_state[f"{hub}.{index}.{hub_attention}.{hub_projection}.weight"]
                    ours[f"{our}.{our_attention}.{our_projection}.weight"] = \
                        weight * config.folded_query_scale if hub_projection == "q" else weight
                ours[f"{our}.{block}.norm.weight"] = hub_state[f"{hub}.{index}.layer_norm.weight"]
            feed_forward = f"{hub}.{len(sublayers)}"
            projections = (("wi_0", "linear_in"), ("wi_1", "linear_gate")) if config.gated_feed_forward \
                else (("wi", "linear_in"),)
            for hub_projection, our_projection in (*projections, ("wo", "linear_out")):
                ours[f"{our}.feed_forward.{our_projection}.weight"] = \
                    hub_state[f"{feed_forward}.DenseReluDense.{hub_projection}.weight"]
            ours[f"{our}.feed_forward_block.norm.weight"] = hub_state[f"{feed_forward}.layer_norm.weight"]
    return ours


def state_dict(hub_state: HubWeights, config: ModelConfig, family: str, order: list[int]
               ) -> dict[str, torch.Tensor]:
    """Our weights, named as `Transformer` names them, from the Hub model's."""
    state = {name.removeprefix("model."): tensor for name, tensor in hub_state.items()}
    full_name = {name.removeprefix("model."): name for name in hub_state}
    shared = next((full_name[name] for name in ("shared.weight", "encoder.embed_tokens.weight") if name in full_name),
                  None)
    if shared is None:
        raise ConversionError("The weights have no token embedding (model.shared.weight).")
    ours = {"src_embedding.tokens.weight": hub_state.rows(shared, order)}
    if not config.share_embeddings:
        ours["tgt_embedding.tokens.weight"] = hub_state.rows(
            full_name.get("decoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"), order)
    if not config.tie_embeddings:
        ours["generator.weight"] = hub_state.rows("lm_head.weight", order)
    bias = hub_state.get("final_logits_bias")
    ours["generator.bias"] = bias.reshape(-1)[order] if bias is not None else torch.zeros(len(order))
    for side, ours_side in (("encoder", "src"), ("decoder", "tgt")):
        if family == "mbart":
            ours[f"{ours_side}_embedding.positions.weight"] = state[f"{side}.embed_positions.weight"][2:]
            ours[f"{ours_side}_embedding.norm.weight"] = state[f"{side}.layernorm_embedding.weight"]
            ours[f"{ours_side}_embedding.norm.bias"] = state[f"{side}.layernorm_embedding.bias"]
        if config.norm == "pre":
            for part in ("weight", "bias"):
                ours[f"{side}_norm.{part}"] = state[f"{side}.layer_norm.{part}"]
    sublayers = {"encoder": [("self_attn", "self_attention", "attention_block")],
                 "decoder": [("self_attn", "self_attention", "self_attention_block"),
                             ("encoder_attn", "cross_attention", "cross_attention_block")]}
    for side, layers in (("encoder", config.n_encoder_layers), ("decoder", config.n_decoder_layers)):
        for i in range(layers):
            hub, our = f"{side}.layers.{i}", f"{side}_layers.{i}"
            for part in ("weight", "bias"):
                for hub_attention, our_attention, block in sublayers[side]:
                    for hub_projection, our_projection in (("q_proj", "w_q"), ("k_proj", "w_k"), ("v_proj", "w_v"),
                                                           ("out_proj", "w_o")):
                        ours[f"{our}.{our_attention}.{our_projection}.{part}"] = \
                            state[f"{hub}.{hub_attention}.{hub_projection}.{part}"]
                    ours[f"{our}.{block}.norm.{part}"] = state[f"{hub}.{hub_attention}_layer_norm.{part}"]
                ours[f"{our}.feed_forward.linear_in.{part}"] = state[f"{hub}.fc1.{part}"]
                ours[f"{our}.feed_forward.linear_out.{part}"] = state[f"{hub}.fc2.{part}"]
                ours[f"{our}.feed_forward_block.norm.{part}"] = state[f"{hub}.final_layer_norm.{part}"]
    return ours
