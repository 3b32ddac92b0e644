"""The page's components by name: each tab module puts the components it builds here, and the listeners and
`render` find them here."""

from __future__ import annotations

from types import SimpleNamespace


class Page(SimpleNamespace):
    """A namespace of the page's components (`page.translation`, `page.mask_grids`, ...)."""
