"""Devices, build capabilities and llama.cpp's buffer report; lives in `app.llama_backend.devices`."""

from app.llama_backend.devices import *  # noqa: F403
from app.llama_backend.devices import (  # noqa: F401
    BuildSpec,
    Capabilities,
    Device,
    MeasuredBuffer,
    MeasureError,
    backends,
    build_spec,
    capabilities,
    capture_llama_logs,
    dry_run_compute,
    list_devices,
    measure_model,
    parse_buffer_report,
)
