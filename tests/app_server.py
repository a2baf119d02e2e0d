"""Start the web app for the browser tests: `python tests/app_server.py PORT [--db PATH]`.

It registers a scripted double of the language model as the model "scripted" (test code only:
the product never ships a fake model). The double answers each agent task with the task's subtly
wrong variant on attempt 1 and its reference solution from attempt 2 on, so a solve shows a wrong
attempt (executed exactly, not correct) followed by a correct one; for a free-form statement it
answers a small valid kernel. Generation is instant, so the tests measure the app, not a model.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

FREE_KERNEL = """extern "C" __global__ void scale(int* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = 3 * a[i];
}"""


class ScriptedModel:
    """agent.model.ChatModel interface: info, generate(messages, on_text) -> Generation."""

    def __init__(self):
        self.info = {"model_id": "scripted", "revision": "test", "fingerprint": "0" * 64,
                     "settings": {"max_new_tokens": 0, "temperature": 0.0}}

    def generate(self, messages, on_text=None):
        from agent.model import Generation
        from agent.tasks import all_tasks

        user = messages[1]["content"]
        attempt = 1 + sum(m["role"] == "assistant" for m in messages)
        task = next((t for t in all_tasks() if f"void {t.kernel}(" in user), None)
        if task is None:
            code = FREE_KERNEL
        else:
            code = task.wrong_source() if attempt == 1 else task.reference_source()
        text = f"Here is the kernel:\n\n```cuda\n{code.rstrip()}\n```\n"
        t0 = time.perf_counter()
        if on_text:
            for i in range(0, len(text), 80):        # streamed in pieces, as a model does
                on_text(text[i:i + 80])
        return Generation(text=text, new_tokens=len(text.split()), prompt_tokens=len(user.split()),
                          seconds=time.perf_counter() - t0, finish_reason="eos")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--db", default=None)
    a = p.parse_args()
    if a.db:
        os.environ["QWENGPU_RESULTS_DB"] = a.db
    from webapp.advanced import register_model
    from webapp.ui import build_app, launch_kwargs

    register_model("scripted", ScriptedModel, "the tests' scripted double")
    demo = build_app(db_path=a.db)
    demo.launch(server_name="127.0.0.1", server_port=a.port, prevent_thread_lock=False, quiet=True,
                **launch_kwargs())


if __name__ == "__main__":
    main()
