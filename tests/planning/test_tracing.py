"""The live-bytes tracer: bytes alive at the peak of a computation on meta tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from genalign.planning.tracing import LiveBytes, storage_keys, trace_peak

META = torch.device("meta")


def test_peak_counts_what_is_alive_at_once():
    with LiveBytes() as tracker:
        a = torch.empty(250, device=META)  # 1000 bytes
        b = a + 1  # 2000 alive
        del a
        c = b * 2  # a was freed: 2000 alive again
    assert tracker.peak == 2000 and tracker.live == 2000
    del b, c


def test_existing_storages_are_not_counted():
    weight = torch.empty(1000, device=META)
    with LiveBytes(storage_keys([weight])) as tracker:
        out = weight * 2
    assert tracker.peak == 4000
    del out


def test_attention_keeps_what_a_fused_kernel_keeps():
    q, k, v = (torch.empty(1, 2, 8, 4, device=META, requires_grad=True) for _ in range(3))
    traced = trace_peak(lambda: F.scaled_dot_product_attention(q, k, v).sum(), existing=storage_keys([q, k, v]))
    out, lse, loss = 1 * 2 * 8 * 4 * 4, 1 * 2 * 8 * 4, 4  # no [8, 8] score matrix
    assert traced.kept == out + lse + loss
    assert traced.peak >= traced.kept


def test_no_grad_trace_keeps_nothing_for_backward():
    x = torch.empty(100, 100, device=META, requires_grad=True)
    traced = trace_peak(lambda: (x @ x).relu(), existing=storage_keys([x]), backward=False)
    assert traced.kept == 100 * 100 * 4  # just the result, nothing saved
