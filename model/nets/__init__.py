"""The networks: the Transformer and the GRU models behind one interface (`seq2seq`), and decoding."""
