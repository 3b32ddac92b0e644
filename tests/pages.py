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


def candidate_bar(page, index: int, above: float = 0.0) -> tuple[float, float]:
    """The screen's point (x, y) `above` px over the middle of the candidates' bar `index` (0: the best), the bar
    scrolled into view first and the point checked to be on the screen, for a mouse press a person could make."""
    bar = page.locator("#candidates .js-plotly-plot .bars .point path").nth(index)
    bar.scroll_into_view_if_needed()
    box, screen = bar.bounding_box(), page.viewport_size
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2 - above
    assert 0 <= x < screen["width"] and 0 <= y < screen["height"], (x, y, screen)
    return x, y


# A cell of the attention heatmap brought into view, and where it then is on the screen: Plotly's axes' offsets in the
# plot and their pixel of a category's index. A marker put at the cell is scrolled into view as any element is (the
# window and every box that scrolls around it), then removed; the point is read again a frame later, with what the
# element under it is.
CELL = """async ([row, column]) => {
    const plot = document.querySelector('#attention .js-plotly-plot');
    const at = () => {
        const { xaxis, yaxis } = plot._fullLayout;
        const box = plot.getBoundingClientRect();
        return [box.left + xaxis._offset + xaxis.l2p(column), box.top + yaxis._offset + yaxis.l2p(row)];
    };
    const marker = document.createElement('div');
    Object.assign(marker.style, { position: 'absolute', left: '0px', top: '0px', width: '1px', height: '1px',
                                  pointerEvents: 'none' });
    plot.append(marker);
    const origin = marker.getBoundingClientRect(), [x, y] = at();
    Object.assign(marker.style, { left: `${x - origin.left}px`, top: `${y - origin.top}px` });
    marker.scrollIntoView({ block: 'center', inline: 'nearest', behavior: 'instant' });
    marker.remove();
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve)));
    const [left, top] = at(), under = document.elementFromPoint(left, top);
    const named = (element) => `${element.tagName} in #${element.closest('[id]')?.id}`;
    const rows = plot.data[0].z;
    return { point: [left, top], screen: [window.innerWidth, window.innerHeight], shown: [rows.length, rows[0].length],
             under: under && !plot.contains(under) ? named(under) : null };
}"""


def heatmap_cell(page, row: int, column: int) -> tuple[float, float]:
    """The attention heatmap's cell at `row`, `column` (0-based) scrolled into view, and the screen's point (x, y) of
    it for a mouse click: on the screen, and on the heatmap (nothing drawn over it)."""
    cell = page.evaluate(CELL, [row, column])
    (x, y), (width, height), (rows, columns) = cell["point"], cell["screen"], cell["shown"]
    assert 0 <= row < rows and 0 <= column < columns, f"cell {row},{column} is not in a heatmap of {rows}x{columns}"
    assert 0 <= x < width and 0 <= y < height, f"cell {row},{column} at {x:.0f},{y:.0f}, off a {width}x{height} screen"
    assert cell["under"] is None, f"cell {row},{column} at {x:.0f},{y:.0f} is under {cell['under']}, not the heatmap"
    return x, y
