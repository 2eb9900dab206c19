"""The per-fault LSTM step as one compiled numba function (the ``numba`` backend).

One fault costs two LSTM cell updates (the staggered states of the context rule), one
head (hidden × classes) and a top-k. In onnxruntime that is ~20 graph nodes whose
per-node overhead, not arithmetic, dominated the measured latency; here it is one call.
Same weights, same maths as ``models.LSTMStep`` (tested against it).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from pagecast.learn.models import DeltaLSTM


@numba.njit(cache=True, fastmath=True)
def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


@numba.njit(cache=True, fastmath=True)
def lstm_step(tok, slot, ip, h, c, sel, emb_tok, emb_slot, emb_ip, w_ih, w_hh, b, w_out, b_out, softmax, k, out_s, out_c):
    """Advance both states (rows of h, c) with the same input; top-k classes of state ``sel``."""
    e = emb_tok.shape[1]
    hid = h.shape[1]
    x = np.empty(e, np.float32)
    for j in range(e):
        x[j] = emb_tok[tok, j] + emb_slot[slot, j]
    if emb_ip.shape[0] > 0:
        for j in range(e):
            x[j] += emb_ip[ip, j]
    gx = np.empty(4 * hid, np.float32)  # input part is shared by both states
    for r in range(4 * hid):
        acc = b[r]
        for j in range(e):
            acc += w_ih[r, j] * x[j]
        gx[r] = acc
    g = np.empty(4 * hid, np.float32)
    for s in range(h.shape[0]):
        for r in range(4 * hid):
            acc = gx[r]
            for j in range(hid):
                acc += w_hh[r, j] * h[s, j]
            g[r] = acc
        for j in range(hid):
            ig = _sig(g[j])
            fg = _sig(g[hid + j])
            gg = np.tanh(g[2 * hid + j])
            og = _sig(g[3 * hid + j])
            c[s, j] = fg * c[s, j] + ig * gg
            h[s, j] = og * np.tanh(c[s, j])
    n_cls = w_out.shape[0]
    logits = np.empty(n_cls, np.float32)
    hs = h[sel]
    for r in range(n_cls):
        acc = b_out[r]
        for j in range(hid):
            acc += w_out[r, j] * hs[j]
        logits[r] = acc
    logits[0] = -1e9  # class "other" names no page
    # top-k by insertion into a sorted buffer (k is small)
    m = 0
    for r in range(1, n_cls):
        v = logits[r]
        if m < k:
            q = m
            m += 1
        elif v > out_s[k - 1]:
            q = k - 1
        else:
            continue
        while q > 0 and out_s[q - 1] < v:
            out_s[q] = out_s[q - 1]
            out_c[q] = out_c[q - 1]
            q -= 1
        out_s[q] = v
        out_c[q] = r
    if softmax:
        mx = out_s[0]
        tot = 0.0
        for r in range(1, n_cls):
            tot += np.exp(logits[r] - mx)
        for q in range(m):
            out_s[q] = np.exp(out_s[q] - mx) / tot
    else:
        for q in range(m):
            out_s[q] = _sig(out_s[q])
    return m


class NumbaLSTMStep:
    """Callable with the ``LSTMStep`` runner signature (numpy in, numpy out)."""

    def __init__(self, model: DeltaLSTM, head: str, k: int):
        if model.cfg.layers != 1:
            raise ValueError("the numba step supports one LSTM layer")
        sd = {n: p.detach().to(torch.float32).numpy().copy() for n, p in model.state_dict().items()}
        self.emb_tok = np.ascontiguousarray(sd["embed.tok.weight"])
        self.emb_slot = np.ascontiguousarray(sd["embed.slot.weight"])
        self.emb_ip = np.ascontiguousarray(sd.get("embed.ip.weight", np.zeros((0, self.emb_tok.shape[1]), np.float32)))
        self.w_ih = np.ascontiguousarray(sd["lstm.weight_ih_l0"])
        self.w_hh = np.ascontiguousarray(sd["lstm.weight_hh_l0"])
        self.b = np.ascontiguousarray(sd["lstm.bias_ih_l0"] + sd["lstm.bias_hh_l0"])
        pre = "horizon_head" if head == "horizon" else "next_head"
        self.w_out = np.ascontiguousarray(sd[f"{pre}.weight"])
        self.b_out = np.ascontiguousarray(sd[f"{pre}.bias"])
        self.softmax = head != "horizon"
        self.k = k
        self._s = np.empty(k, np.float32)
        self._c = np.empty(k, np.int64)

    def __call__(self, token, slot, ip, h, c, sel):
        h2 = np.ascontiguousarray(h[0])
        c2 = np.ascontiguousarray(c[0])
        m = lstm_step(int(token[0]), int(slot[0]), int(ip[0]), h2, c2, int(sel[0]), self.emb_tok, self.emb_slot,
                      self.emb_ip, self.w_ih, self.w_hh, self.b, self.w_out, self.b_out, self.softmax, self.k,
                      self._s, self._c)
        return self._s[:m].copy(), self._c[:m].copy(), h2[None], c2[None]
