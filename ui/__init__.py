"""The app's page: layout (ui/tabs/), one session per user (ui/session.py), the operations on it
(ui/operations.py), how a session is shown (ui/render.py), events (ui/listeners.py), links, the JSON API and the
services they use. `build_demo(services)` builds it; importing it loads nothing."""

from attention_inspector.model.api.services import Services, load_services  # noqa: F401
from attention_inspector.ui.demo import build_demo, launch_options  # noqa: F401
