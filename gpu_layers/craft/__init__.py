"""The layer compiler: named residual fields, a block library, a layer allocator and an assembler
that writes Qwen3.5 decoder-layer tensors (tracr's craft, for Gated DeltaNet layers).

Modules
  fields.py        Field (one / bits / dual / onehot / rail3 / scalar), Lin (linear forms), Layout
  physics.py       the constants that make SiLU, sigmoid and the DeltaNet gate exact in fp32
  circuit.py       Circuit (graph of stages over fields + machine vocabulary), MLPStage, MixerStage,
                   MemoryPort, Block, Cost
  blocks/          the block library: gate, threshold_gate, bitwise, equal, compare, mux, shift,
                   adder (carry-lookahead, 3 stages), memory (DeltaNet ports; read=False: write-only),
                   banked_memory (more slots than a key head), read_bits; MLPBuilder for custom
                   threshold stages
  assemble.py      compile_circuit(circuit, config) -> Compiled: passes validate -> schedule ->
                   track_norms -> write_layers -> vocabulary; Compiled.report() (per-layer budget table)
  compiled.py      CompiledMachine: the contract with the splice (fixed)
  streamed.py      StreamedMachine: a CompiledMachine whose layers are written when the splice asks
                   (compile_streamed: the core's 15.6 GB of dense layers never exist at once)
  state.py         memory ports decoded from the recurrent state in the transformers cache
                   (Compiled.port(name): a port's layer and value heads)
  machine_model.py build_machine_model(machine) -> stock Qwen3_5ForCausalLM (+ one inert attention layer):
                   the one machine-only builder (tests, benchmarks, demos, the splice's reference)
  machines.py      MACHINES: the compiled machines by name (`kl --machine`); build_machine(name, config)
  testing.py       harness of the exactness tests (drive both transformers paths, decode, compare)
  demo_regfile.py  demonstration: a 4-lane register file of 32-bit registers with an adder, via generate

Writing a machine (see demo_regfile.py for a complete one):

    from gpu_layers.craft import blocks as B
    from gpu_layers.craft.circuit import Circuit
    from gpu_layers.craft.fields import bits, dual, onehot
    from gpu_layers.craft.assemble import compile_circuit
    from gpu_layers.craft.machine_model import build_machine_model

    c = Circuit("adder")
    a = c.input(bits("a", 32), default=0)            # every machine token carries every input field
    b = c.input(bits("b", 32), default=0)
    op = c.input(onehot("op", 2), default=0)         # tokens that do not name it carry the default
    s = B.adder(c, a, b, name="s")                   # 3 MLP stages; s.outputs[0] is the bits field "s"
    m = B.memory(c, "acc", slots=1, wbits=32, waddr=0, raddr=0, data=s.outputs[0],
                 we=op.hot(1))                       # a DeltaNet register written when op == 1
    c.token("<add 5 7>", a=5, b=7, op=1)             # machine vocabulary: embedding rows
    c.logit("<add 5 7>", 3.0 * m.outputs[0].bit(0))  # LM-head rows: linear forms of the final residual
    comp = compile_circuit(c, qwen35_text_config)    # reads intermediate_size, linear heads, ... eps
    print(comp.report())                             # layers used, % of neurons / heads per layer
    machine = comp.machine                           # -> the splice (gpu_layers/splice.py)
    model = build_machine_model(machine)             # or a machine-only stock model

Driving a machine with stock `generate` across calls (the host appends tokens between calls): pass
`attention_mask=torch.ones_like(ids)` together with the carried cache (`cache=`: transformers 5.24's
keyword for the model's forward and `generate`; `past_key_values` is deprecated there), otherwise
transformers 5.24 re-feeds the whole prompt on top of the linear-attention state (tests/test_craft_demo.py).

Rules the compiler enforces (fail fast, with the list of problems):
  * every field is written once (SSA) and has a data-independent sum of squares, so each RMSNorm's
    scale is a compile-time constant (norm weights make every norm return the raw values); a
    `scalar` field alive at a norm is refused;
  * the only bias source is the `one` field; the last machine dim (`text_flag_dim`) is read by no
    weight;
  * every block re-digitizes: threshold steps have a margin >= 0.25 of the unit, so analog error
    never accumulates; outputs decode exactly (fp32, both transformers paths; see the tests).
  * bf16: a threshold step stays exact in bf16 only while max|t|/margin <= 32 (bf16 rounds the
    gate pre-activation to 8 bits); `Compiled.bf16_unsafe()` / the report's `|t|/m` column name the
    stages that are exact in fp32 only. bf16-safe variants: prefix_adder (Kogge-Stone),
    compare(mode="prefix"), equal(fanin=16); gates, mux, shifts, memory ports are safe as they are.
  * a stage must fit one layer (neurons <= intermediate_size; key heads, with the per-layer
    constant head, <= linear_num_key_heads); the scheduler packs stages ASAP in dependency order.
"""
