"""Text: tokenizers and vocabularies (ours, and the Hub models' through their own files), words, batches."""
