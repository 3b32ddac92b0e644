"""What the browser tests, the screenshot and the browser benchmark do on the page as a user would."""


def tab_button(page, name: str):
    """The button of the tab `name` below the view: a tab of Gradio's tab bar, or one of those Gradio moves into its
    overflow menu when the bar is full (ui/static/style.css shows them in the bar all the same, as plain buttons).
    A Playwright locator, of the sync or the async API as `page` is."""
    tabs = page.locator("#what-if")
    return tabs.get_by_role("tab", name=name).or_(tabs.locator(".overflow-dropdown button", has_text=name)).first


def open_tab(page, name: str) -> None:
    """Open the tab `name` below the view."""
    tab_button(page, name).click()
