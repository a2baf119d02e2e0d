"""The agent loop's plumbing with scripted doubles of the language model (test doubles live only here):
a double that answers each task's reference solution passes every task on the interpreter; one that
answers subtly wrong kernels is caught and logged as wrong on every attempt; feedback, retries,
extraction, signature checks, unsupported PTX, faults and a crashing model are recorded, never
raised."""
import json

import numpy as np
import pytest

from agent.backends import BackendUnavailable, InterpreterBackend, get_backend
from agent.capabilities import capabilities_text
from agent.execute import evaluate, find_entry
from agent.extract import extract_kernel
from agent.loop import run_eval, solve_task
from agent.model import ChatModel, Generation
from agent.prompts import load_prompts
from agent.record import ResultsDB
from agent.tasks import all_tasks, get_task
from gpu_layers.errors import QwenGPUError
from gpu_layers.ptx.validator import SUPPORTED

TASKS = all_tasks()
DOUBLE_TASKS = [t for t in all_tasks() if "double" in t.kinds]


class ScriptedModel(ChatModel):
    """Test double: replies from a function of (task name, attempt number, messages)."""

    def __init__(self, reply, model_id="scripted"):
        self.reply = reply
        self.calls = []
        self.info = {"model_id": model_id, "revision": "test", "fingerprint": "0" * 64,
                     "settings": {"max_new_tokens": 0, "temperature": 0.0}}

    def generate(self, messages, on_text=None):
        task = _task_of(messages)
        attempt = 1 + sum(m["role"] == "assistant" for m in messages)
        self.calls.append((task, attempt, messages))
        text = self.reply(task, attempt, messages)
        if on_text:
            on_text(text)
        return Generation(text=text, new_tokens=len(text.split()), prompt_tokens=100, seconds=0.01,
                          finish_reason="eos")


def _task_of(messages):
    user = messages[1]["content"]
    for t in all_tasks():
        if f"void {t.kernel}(" in user:
            return t.name
    return None


def fenced(code, prose="Here is the kernel:"):
    return f"{prose}\n\n```cuda\n{code.rstrip()}\n```\n\nIt uses one thread per element."


@pytest.fixture
def db(tmp_path):
    d = ResultsDB(tmp_path / "results.db")
    yield d
    d.close()


@pytest.fixture(scope="module")
def prompts():
    return load_prompts()


def rows(db, **where):
    q = "SELECT * FROM attempts" + (" WHERE " + " AND ".join(f"{k} = ?" for k in where) if where else "")
    return db.query(q + " ORDER BY id", list(where.values()))


def test_reference_double_passes_every_task_on_the_interpreter(db, prompts):
    model = ScriptedModel(lambda task, attempt, msgs: fenced(get_task(task).reference_source()))
    run_id, summary = run_eval(TASKS, model, get_backend("interp"), prompts, db=db, max_attempts=3, argv=["test"])
    assert summary["first_try"] == summary["n_tasks"] == len(TASKS) >= 30
    assert summary["first_try_rate"] == 1.0 and summary["within_n_rate"] == 1.0
    got = rows(db, run_id=run_id)
    assert len(got) == len(TASKS)                                   # one attempt each, every one logged
    for r in got:
        assert r["verdict"] == "correct" and r["correct"] == 1 and r["executed_exactly"] == 1
        assert r["attempt"] == 1 and r["backend"] == "interp" and r["prompt_version"] == prompts.version
        assert r["prompt_sha256"] == prompts.sha256 and r["model_id"] == "scripted"
        assert r["ptx_sha256"] and len(r["ptx_sha256"]) == 64
        assert r["run_steps"] > 0 and r["inputs_passed"] == r["inputs_total"]
        assert r["feedback"] is None
        assert json.loads(r["run_results"])[0]["fingerprint"]
    run = db.query("SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
    assert run["status"] == "finished" and run["first_try_rate"] == 1.0
    assert db.query("SELECT COUNT(*) AS k FROM task_results WHERE run_id = ? AND first_try = 1", [run_id])[0]["k"] == len(TASKS)


def test_wrong_double_is_caught_and_logged_as_wrong_on_every_attempt(db, prompts):
    model = ScriptedModel(lambda task, attempt, msgs: fenced(get_task(task).wrong_source()))
    run_id, summary = run_eval(TASKS, model, get_backend("interp"), prompts, db=db, max_attempts=2, argv=["test"])
    assert summary["first_try"] == 0 and summary["within_n"] == 0
    got = rows(db, run_id=run_id)
    assert len(got) == 2 * len(TASKS)
    for r in got:
        assert r["verdict"] == "wrong", (r["task"], r["verdict"], r["reason"])
        assert r["executed_exactly"] == 1 and r["correct"] == 0     # exact, and still wrong
        fm = json.loads(r["first_mismatch"])
        assert fm["expected"] != fm["got"]
    firsts = [r for r in got if r["attempt"] == 1]
    assert all("output is wrong" in r["feedback"] and "expected" in r["feedback"] for r in firsts)
    # the second attempt was generated from the first reply plus the feedback
    for task, attempt, msgs in model.calls:
        if attempt == 2:
            assert msgs[-2]["role"] == "assistant" and msgs[-1]["role"] == "user"
            assert "output is wrong" in msgs[-1]["content"]


def test_double_tasks_with_the_reference_double(db, prompts):
    """The double tasks pass with their reference solutions (f64 is in the interpreter)."""
    model = ScriptedModel(lambda task, attempt, msgs: fenced(get_task(task).reference_source()))
    _, summary = run_eval(DOUBLE_TASKS, model, get_backend("interp"), prompts, db=db, max_attempts=1, argv=["t"])
    assert summary["verdicts"] == {"correct": len(DOUBLE_TASKS)}


def test_feedback_and_retries_until_solved(db, prompts):
    t = get_task("count_primes")
    replies = {
        1: "I think you should use a loop over the numbers.",                            # no code
        2: fenced('extern "C" __global__ void count_primes(int n, int* count) { count[0] = n }'),  # compile error
        3: fenced('extern "C" __global__ void count_primes(int n, int* count) {\n'
                  '  float x = expf((float)n);\n  if (x > 0.0f) atomicAdd(count, 1);\n}\n'),  # unsupported
        4: fenced('extern "C" __global__ void count_primes(int n) { }'),                  # signature
        5: fenced('extern "C" __global__ void count_primes(int n, int* count) { while (n > 0) { } }'),  # budget
        6: fenced(t.wrong_source()),                                                       # wrong
        7: fenced(t.reference_source()),
    }
    model = ScriptedModel(lambda task, attempt, msgs: replies[attempt])
    run_id = db.start_run({"kind": "eval", "model_id": "scripted", "backend": "interp", "prompt_version": "v1",
                           "max_attempts": 8})
    out = solve_task(t, model, get_backend(), prompts, db=db, run_id=run_id, max_attempts=8)
    assert out.solved_at == 7 and not out.first_try
    got = rows(db, run_id=run_id)
    assert [r["verdict"] for r in got] == ["no_code", "compile_error", "unsupported", "signature_mismatch",
                                           "runtime_error", "wrong", "correct"]
    fb = [r["feedback"] for r in got]
    assert "could not find a kernel" in fb[0]
    assert "did not compile" in fb[1] and "error" in fb[1]
    assert "ex2.approx" in fb[2] and "approximate" in fb[2]          # the validator names the instruction
    assert "signature" in fb[3] and t.signature() in fb[3]
    assert "step budget" in fb[4]
    assert "output is wrong" in fb[5]
    assert fb[6] is None
    assert got[1]["compile_ok"] == 0 and json.loads(got[1]["compile_messages"])
    assert got[2]["compile_ok"] == 1 and got[2]["validate_ok"] == 0
    assert got[4]["executed"] == 0 and got[4]["executed_exactly"] == 0 and "budget" in got[4]["run_error"]
    assert [r["attempt"] for r in got] == list(range(1, 8))
    res = db.query("SELECT * FROM task_results WHERE run_id = ?", [run_id])[0]
    assert res["solved_at"] == 7 and res["first_try"] == 0 and res["attempts_used"] == 7


def test_runtime_faults_are_named(db, prompts):
    t = get_task("vec_add")
    oob = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {\n' \
          '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  c[i + 1000] = a[i] + b[i];\n}\n'
    ev = evaluate(oob, t, get_backend())
    assert ev.verdict == "runtime_error" and "out-of-bounds" in ev.reason
    undef = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {\n' \
            '  __shared__ float s[64];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n' \
            '  if (i < n) c[i] = s[threadIdx.x];\n}\n'
    ev = evaluate(undef, t, get_backend())
    assert ev.verdict == "runtime_error" and "undefined" in ev.reason


def test_huge_local_arrays_are_refused_before_running():
    t = get_task("vec_add")
    big = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, int n) {\n' \
          '  volatile float tmp[1 << 22];\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n' \
          '  if (i < n) { tmp[i] = a[i]; c[i] = tmp[i] + b[i]; }\n}\n'
    ev = evaluate(big, t, get_backend())
    assert ev.verdict == "unsupported" and "local memory" in ev.reason


def test_a_crashing_model_is_recorded_not_raised(db, prompts):
    def boom(task, attempt, msgs):
        raise RuntimeError("CUDA out of memory (simulated)")
    model = ScriptedModel(boom)
    run_id, summary = run_eval([get_task("vec_add")], model, get_backend(), prompts, db=db, max_attempts=2, argv=["t"])
    got = rows(db, run_id=run_id)
    assert [r["verdict"] for r in got] == ["internal_error", "internal_error"]
    assert "out of memory" in got[0]["reason"] and got[0]["stage"] == "generate"


def test_mangled_names_and_signatures():
    t = get_task("vec_add")
    cpp = t.reference_source().replace('extern "C" ', "")          # C++ linkage: a mangled entry name
    ev = evaluate(cpp, t, get_backend())
    assert ev.verdict == "correct" and ev.entry.startswith("_Z7vec_add")
    other = t.reference_source().replace("void vec_add(", "void add_vectors(")
    ev = evaluate(other, t, get_backend())
    assert ev.verdict == "signature_mismatch" and "add_vectors" in ev.reason
    fewer = 'extern "C" __global__ void vec_add(const float* a, float* c, int n) { }'
    ev = evaluate(fewer, t, get_backend())
    assert ev.verdict == "signature_mismatch" and "4 parameters" in ev.reason
    swapped = 'extern "C" __global__ void vec_add(const float* a, const float* b, float* c, float n) { }'
    ev = evaluate(swapped, t, get_backend())
    assert ev.verdict == "signature_mismatch" and "parameter 4" in ev.reason


def test_unsafe_source_is_refused_by_the_sandbox():
    t = get_task("vec_add")
    ev = evaluate('#include "/etc/passwd"\n' + t.reference_source(), t, get_backend())
    assert ev.verdict == "compile_error" and "not allowed" in " ".join(ev.details)


def test_extraction():
    k = 'extern "C" __global__ void f(int* a) { a[0] = 1; }\n'
    assert extract_kernel(f"```cuda\n{k}```", "f").code == k
    assert extract_kernel(f"```cpp\n{k}```", "f").code == k
    assert extract_kernel(f"```\n{k}```", "f").code == k
    two = f"```cuda\n__global__ void g(int* a) {{ }}\n```\nand\n```c++\n{k}```\n"
    assert extract_kernel(two, "f").code == k
    cut = extract_kernel(f"```cuda\n{k}", "f")
    assert cut.code == k and cut.truncated and "unterminated" in cut.note
    assert extract_kernel(k, "f").code == k                                           # bare code
    assert extract_kernel(f"<think>```cuda\n__global__ void x(){{}}\n```</think>\n```cuda\n{k}```", "f").code == k
    none = extract_kernel("```python\nprint(1)\n```", "f")
    assert none.code is None and "python" in none.note
    assert extract_kernel("", "f").code is None
    assert extract_kernel("```cuda\n__global__ " + "x" * 100_000 + "\n```", "f").code is None


def test_prompt_states_signature_launch_and_capabilities(prompts):
    t = get_task("warp_sum")
    msgs = prompts.start(t)
    assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
    assert capabilities_text() in msgs[0]["content"]
    assert "__shfl_down_sync" in msgs[0]["content"] and "__syncthreads()" in msgs[0]["content"]
    assert t.signature() in msgs[1]["content"] and t.launch in msgs[1]["content"]
    assert prompts.version == "v1" and len(prompts.sha256) == 64


def test_capabilities_follow_the_validator_table(monkeypatch):
    before = capabilities_text()
    assert "double (64-bit float): + - * /, fma, sqrt" in before
    assert "double (64-bit floating point): use float" not in before
    for f in [k for k in SUPPORTED if ".f64" in k]:
        monkeypatch.delitem(SUPPORTED, f)
    after = capabilities_text()
    assert "double (64-bit floating point): use float" in after
    assert "double (64-bit float): + - * /, fma, sqrt" not in after
    assert load_prompts().sha256 != (monkeypatch.undo() or load_prompts().sha256)


def test_backends():
    assert isinstance(get_backend("auto"), InterpreterBackend)
    assert get_backend("interp").name == "interp"
    assert get_backend("model").name == "model"
    with pytest.raises(BackendUnavailable):
        get_backend("gpu")


def test_the_model_backend_names_a_kernel_outside_the_core_before_compiling_it():
    # 256 threads: eight warps per block, which the machine core does not run (refused by name
    # before any core is loaded); the interpreter's reference run comes first and succeeds
    from gpu_layers.nvcc import compile_cuda
    ptx = compile_cuda('extern "C" __global__ void k(int* a) { a[threadIdx.x] = threadIdx.x; }\n')
    with pytest.raises(QwenGPUError, match="256 threads per block"):
        get_backend("model").run(ptx, "k", (1, 1, 1), (256, 1, 1), 0, [np.zeros(256, np.int32)], 10_000)


def test_adhoc_statement_is_compiled_and_validated_only(db, prompts):
    k = 'extern "C" __global__ void count_primes(int n, int* c) { if (threadIdx.x == 0) atomicAdd(c, n); }\n'
    model = ScriptedModel(lambda task, attempt, msgs: ("nothing" if attempt == 1 else fenced(k)))
    run_id = db.start_run({"kind": "solve", "model_id": "scripted"})
    out = solve_task(None, model, get_backend(), prompts, db=db, run_id=run_id, max_attempts=3,
                     statement="count the primes below n in parallel")
    got = rows(db, run_id=run_id)
    assert [r["verdict"] for r in got] == ["no_code", "unchecked"] and out.last_verdict == "unchecked"
    assert got[0]["task"] == "adhoc" and got[0]["statement"] == "count the primes below n in parallel"
    assert "count the primes below n in parallel" in json.loads(got[0]["prompt_messages"])[1]["content"]


def test_find_entry_prefers_the_exact_name():
    from gpu_layers.ptx import parse_ptx
    from gpu_layers.nvcc import compile_cuda

    src = ('extern "C" __global__ void k(int* a) { a[0] = 1; }\n'
           '__global__ void k(float* a) { a[0] = 1.0f; }\n')
    mod = parse_ptx(compile_cuda(src))
    assert find_entry(mod, "k") == "k"
