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


def step_button_lines(page) -> list[float]:
    """How many lines high each step button's name is («, ‹ Prev, Next ›, »: the page's and a notebook view's ids
    alike), its height inside padding and border over its line height."""
    return page.evaluate("""() => ['first', 'previous', 'next', 'last'].map((id) => {
        const button = document.getElementById(id), style = getComputedStyle(button);
        const line = parseFloat(style.lineHeight) || 1.25 * parseFloat(style.fontSize);
        const inner = button.getBoundingClientRect().height - ['paddingTop', 'paddingBottom', 'borderTopWidth',
            'borderBottomWidth'].reduce((sum, side) => sum + parseFloat(style[side]), 0);
        return inner / line; })""")


# Where a cell of the attention heatmap is on the screen: Plotly's axes' offsets in the plot and their pixel of a
# category's index.
CELL = """([row, column]) => {
    const plot = document.querySelector('#attention .js-plotly-plot');
    const { xaxis, yaxis } = plot._fullLayout;
    const box = plot.getBoundingClientRect();
    return [box.left + xaxis._offset + xaxis.l2p(column), box.top + yaxis._offset + yaxis.l2p(row)];
}"""


def heatmap_cell(page, row: int, column: int) -> tuple[float, float]:
    """The screen's point (x, y) of the attention heatmap's cell at `row`, `column` (0-based), for a mouse click."""
    x, y = page.evaluate(CELL, [row, column])
    return x, y
