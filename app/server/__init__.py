"""The local OpenAI-compatible server: editors, agents and scripts get the same speculative engine as the window.

Layer: above the engine (it drives a `SpecSession` through jobs), below the command line and the window. HTTP runs
on its own thread and event loop; the llama contexts stay on the one thread that owns them (`EngineThread` for
`specchat serve`, the window's worker in the GUI), which runs one job at a time (`run_job`)."""
