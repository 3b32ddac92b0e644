"""Models from the Hugging Face Hub converted into the Transformer, and the checks made before a download."""
