"""Studies over many sentences, each a command: which heads matter, word alignments, which explanation is
faithful, which heads carry a counterfactual's difference."""
