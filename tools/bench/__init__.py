"""The research bench: SpecChat's lookup policy and llama.cpp's n-gram types replayed on recorded replies with a
machine's measured row costs, the clairvoyant copy bound, and bench reports pooled across runs.

Run from a checkout: `python -m tools.bench COMMAND` (bench, bench-replay, bench-pool; see its --help). It stands
on the app's public interfaces (app.cli.bench's report and add-on hook, the engine's TargetContext protocol and
its `clock`, PromptLookup's `sure_cut`); the product never imports it.
"""
