"""`python -m attention_inspector …`: the same as the `attention-inspector` command."""

from attention_inspector.cli import main

main()
