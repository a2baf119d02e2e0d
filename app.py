"""qwenGPU's web app (Gradio): run CUDA inside the model, watch it think in registers, and track Qwen's
first-try success. `python app.py` starts it on http://127.0.0.1:7860 (a Hugging Face Space runs this
file as is; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT are honoured). The page itself is built in
webapp/ (see ARCHITECTURE.md, "The web app")."""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")   # no telemetry: traffic stays local

from webapp.ui import build_app, launch_kwargs  # noqa: E402

demo = build_app()


def main(argv=None):
    p = argparse.ArgumentParser(description="qwenGPU web app")
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1, or $GRADIO_SERVER_NAME)")
    p.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    a = p.parse_args(argv)
    demo.launch(server_name=a.host, server_port=a.port, **launch_kwargs())


if __name__ == "__main__":
    main()
