"""The page's tabs below the core loop: one module each, with `build(page, services)` and `wire(page, services)`."""
