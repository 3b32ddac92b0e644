"""What the page and the Python API share, above every other package: the loaded checkpoints, the trace workers and
the door (`services`), and the JSON API's answers (`answers`), which import no Gradio."""
