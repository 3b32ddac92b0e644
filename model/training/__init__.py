"""Multi30k, training (one process or torchrun) and evaluation."""
