"""The models and everything computed from them, in layers that import only downward:

- `keys`: the names the API, links, model code and menus share.
- `text/`: tokenizers, vocabularies and words (ours and the Hub's), batches of token ids.
- `nets/`: the networks (the Transformer, the GRU models, their common interface) and how they decode.
- `explain/`: measures of one translation: contributions (ALTI+), gradient attributions, faithfulness, head
  statistics, activation patching.
- `serving/`: a checkpoint loaded into a `Translator`, the catalog of checkpoints, trace workers, trace files.
- `training/`: Multi30k, training (one process or torchrun), evaluation.
- `analysis/`: studies over many sentences: which heads matter, word alignments, faithfulness, patching.
- `hub/`: Hugging Face models converted into the Transformer.
"""
