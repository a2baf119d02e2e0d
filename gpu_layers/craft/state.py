"""Reading memory ports out of a model's recurrent state (the transformers cache), not its outputs.

A DeltaNet head's state S (key dim x value dim) holds, for a port written with one-hot keys and
beta = 1, the written value vector in row `slot` (S[slot] := v: the delta rule replaces the row
whole; every other row is untouched, since the one-hot key is an exact 0 there). A port stores bit
i of its word dual rail in the value dims (2i, 2i+1) of its head (`write_layer`): after SiLU the
rails of a written bit are (KEY_L, 0) for 1 and (0, KEY_L) for 0; a slot never written is all
exact zeros. So a port's contents are decodable from the cache alone, at whatever position the
cache was left, without any read port: that is what write-only ports (`memory(read=False)`) rely on.

    st = recurrent_state(cache, layer)                 # (batch, value heads, key dim, value dim)
    words = read_port_state(st, comp.port("rf"))       # [lane][slot] -> int | None
"""
from __future__ import annotations

import numpy as np
import torch

from . import physics as P
from .assemble import PortPlacement

TOL = 0.25 * P.KEY_L     # a rail is within 25% of KEY_L of its code value (0 or KEY_L)


class StateDecodeError(ValueError):
    """A slot's rails do not decode cleanly (neither a written word nor an exact blank)."""


def recurrent_state(source, layer: int) -> torch.Tensor:
    """The recurrent state tensor (batch, value heads, key dim, value dim) of compiled layer `layer`
    from a transformers Cache (DynamicCache), a model output carrying one (`.cache` /
    `.past_key_values`), the fast executor's state (gpu_layers.craft.fast.FastState: same layout),
    or a {layer: tensor} dict. A copy: the cache updates its tensors in place."""
    if isinstance(source, dict):
        st = source[layer]
    else:
        cache = source
        for attr in ("cache", "past_key_values"):
            if not hasattr(cache, "get_recurrent_state") and getattr(source, attr, None) is not None:
                cache = getattr(source, attr)
        if not hasattr(cache, "get_recurrent_state"):
            raise TypeError(f"cannot read a recurrent state from {type(source).__name__}")
        st = cache.get_recurrent_state(layer)
        if st is None:
            raise ValueError(f"layer {layer} has no recurrent state yet (no token fed?)")
    return st.detach().to("cpu", torch.float32).clone()


def _rails(state: torch.Tensor, place: PortPlacement, batch: int, slots: int) -> np.ndarray:
    """(lanes, slots, wbits, 2): the (bit, not-bit) rails of every stored bit."""
    S = state[batch].double().numpy()
    p = place.port
    out = np.zeros((p.lanes, slots, p.wbits, 2))
    for lane in range(p.lanes):
        for h, vh in enumerate(place.heads[lane]):
            lo, hi = h * place.bits_per_head, min(p.wbits, (h + 1) * place.bits_per_head)
            out[lane, :, lo:hi] = S[vh, :slots, :2 * (hi - lo)].reshape(slots, hi - lo, 2)
    return out


def read_port_state(state: torch.Tensor, place: PortPlacement, batch: int = 0, strict: bool = True,
                    slots: int | None = None) -> list[list[int | None]]:
    """Every slot of every lane of a port: [lane][slot] -> its word, or None if never written.
    state: the port's layer's recurrent state (recurrent_state). strict: raise StateDecodeError
    when a rail lies outside TOL of its code, or a slot is partly blank, instead of guessing."""
    p = place.port
    n = slots if slots is not None else p.slots
    r = _rails(state, place, batch, n)
    a, b = r[..., 0], r[..., 1]
    blank = (np.abs(a) <= TOL) & (np.abs(b) <= TOL)
    bit = a > b
    clean = np.where(bit, (np.abs(a - P.KEY_L) <= TOL) & (np.abs(b) <= TOL),
                     (np.abs(b - P.KEY_L) <= TOL) & (np.abs(a) <= TOL)) | blank
    allblank, anyblank = blank.all(-1), blank.any(-1)
    if strict:
        bad = np.argwhere(~clean)
        if len(bad):
            l, s, i = bad[0]
            raise StateDecodeError(f"port {p.name} lane {l} slot {s} bit {i}: rails ({a[l, s, i]:.4g}, "
                                   f"{b[l, s, i]:.4g}) are not a clean code ({len(bad)} such bits)")
        bad = np.argwhere(anyblank & ~allblank)
        if len(bad):
            l, s = bad[0]
            raise StateDecodeError(f"port {p.name} lane {l} slot {s}: blank bits in a written word")
    weights = [1 << i for i in range(p.wbits)]        # Python ints: words of any width

    def word(l, s):
        return sum(w for w, b in zip(weights, bit[l, s]) if b)
    return [[None if allblank[l, s] else word(l, s) for s in range(n)] for l in range(p.lanes)]


def max_rail_error(state: torch.Tensor, place: PortPlacement, batch: int = 0) -> float:
    """The largest distance of any rail of the port's slots from its nearest code (0 or KEY_L),
    relative to KEY_L: how far the stored analog values are from ideal."""
    x = _rails(state, place, batch, place.port.slots)
    return float(np.minimum(np.abs(x), np.abs(x - P.KEY_L)).max() / P.KEY_L)


def port_contents(source, comp, name: str, batch: int = 0, strict: bool = True) -> list[list[int | None]]:
    """read_port_state of port `name` of Compiled `comp`, from a cache (or model output / dict)."""
    place = comp.port(name)
    return read_port_state(recurrent_state(source, place.layer), place, batch, strict)
