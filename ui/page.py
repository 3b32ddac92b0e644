"""The page's components by name: each tab module puts the components it builds here, and the listeners and
`render` find them here."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace


@dataclass(frozen=True)
class Part:
    """A part of the core view (`page.core`, ui/plots.py `core_view`): a key of `render`'s updates like a component,
    sent to the page inside the core view's one value under `name` (ui/listeners.py `folded`)."""

    name: str


class Page(SimpleNamespace):
    """A namespace of the page's components (`page.model`, `page.mask_grids`, ...) and the core view's parts
    (`page.translation`, `page.status`, `page.detachment`, `page.attention`, `page.candidates`, `page.step_text`,
    `page.neuron`)."""

    def __init__(self, **components):
        super().__init__(translation=Part("translation"), status=Part("status"), detachment=Part("detachment"),
                         attention=Part("attention"), candidates=Part("candidates"), step_text=Part("steps"),
                         neuron=Part("neuron"), **components)

    @property
    def parts(self) -> tuple[Part, ...]:
        return (self.translation, self.status, self.detachment, self.attention, self.candidates, self.step_text,
                self.neuron)
