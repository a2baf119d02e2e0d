"""The constants that make Qwen3.5's soft functions exact in fp32 (each checked in tests/test_craft_physics.py).

fp32 facts used:
  silu(x) == x exactly for x >= 17 (sigmoid rounds to 1.0); silu(x) == -0.0 for x <= -88.8
  (exp(-x) overflows); silu(0) == 0.
  sigmoid(x) == 1.0 for x >= 17; == 0.0 for x <= -88.8.
  softplus(-100) ~ 3.8e-44, so exp(-exp(A_log) * softplus(a - 100)) == 1.0 for A_log = 0, a ~ 0:
  the DeltaNet gate is held open; a >= ~200 makes exp(g) == 0: the state is wiped.
"""

# MLP step neurons: a threshold t (margin m: |t| >= m on every valid input) becomes
#   step(t) = (silu(G t/m + K) - silu(G t/m)) / K
# true side: G t/m >= G >= 17, both silus are exact identities -> ((s+K) - s)/K = 1 (up to rounding)
# false side: G t/m + K <= K - G = -100 <= -88.8, both silus are exact zeros -> exactly 0.
STEP_G = 200.0
STEP_K = 100.0
BIAS_K = 100.0          # the bias neuron: silu(BIAS_K * one) * one / BIAS_K = 1

# DeltaNet memory heads
KEY_L = 100.0           # key / query / value-rail pre-activation: silu(100) = 100, silu(-100) = -0
BETA_G = 200.0          # in_proj_b = +-200 -> beta exactly 1 / exactly 0
DT_BIAS = -100.0        # gate held open: exp(g) == 1.0
A_LOG = 0.0             # A = 1
RESET_A = 1000.0        # a reset drives in_proj_a to 1000: g = -900, exp(g) == 0: the state is wiped
Z_GAIN = 32.0           # read enable: z = 32 -> silu(z) = 32 exactly; z = 0 -> silu(0) = 0 (output off)
