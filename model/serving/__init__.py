"""A checkpoint loaded and served: the `Translator`, checkpoint files, the catalog, trace workers, trace files."""
