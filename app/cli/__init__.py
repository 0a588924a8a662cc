"""The `specchat` command line: the parser, generate, bench, memory, models, hub, rendering and the self-test."""
