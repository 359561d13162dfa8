# Sustained FP8 GEMM at the prompt-step shapes (torch._scaled_mm, rowwise scales, bf16 out),
# with two kinds of data: Gaussian (signs and exponents spread, like real weights/activations)
# and FillRandom-like positive values in [0.5, 2) (gemv_bench's data). Prints TFLOP/s and the
# wall time of each phase so nvidia-smi's log can be matched to it.
import json, sys, time, torch
out = {}
dev = "cuda"
M = 15360
shapes = {"gate_up": (28672, 4096), "down": (4096, 14336), "qkv": (6144, 4096), "o": (4096, 4096)}
def make(kind, rows, cols):
    if kind == "gauss":
        x = torch.randn(rows, cols, device=dev, dtype=torch.float32)
    else:
        x = torch.rand(rows, cols, device=dev, dtype=torch.float32) * 1.5 + 0.5
    s = x.abs().amax(dim=1, keepdim=True) / 448.0
    return (x / s).to(torch.float8_e4m3fn), s.float()
for kind in ["gauss", "positive", "zeros"]:
    for name, (n, k) in shapes.items():
        if kind == "zeros":
            a = torch.zeros(M, k, device=dev, dtype=torch.float8_e4m3fn); sa = torch.ones(M, 1, device=dev)
            b = torch.zeros(n, k, device=dev, dtype=torch.float8_e4m3fn); sb = torch.ones(n, 1, device=dev)
        else:
            a, sa = make(kind, M, k)
            b, sb = make(kind, n, k)
        bt = b.t()
        f = lambda: torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16, use_fast_accum=True)
        try:
            f()
        except Exception as e:
            out[f"{kind}/{name}"] = str(e); print(kind, name, e); continue
        torch.cuda.synchronize()
        # Short burst (as gemv_bench) then sustained 3 s.
        for label, seconds in [("burst", 0.03), ("sustained", 3.0)]:
            t0 = time.time(); n_iter = 0
            st = torch.cuda.Event(enable_timing=True); en = torch.cuda.Event(enable_timing=True)
            st.record()
            while True:
                for _ in range(4): f()
                n_iter += 4
                torch.cuda.synchronize()
                if time.time() - t0 > seconds: break
            en.record(); torch.cuda.synchronize()
            ms = st.elapsed_time(en) / n_iter
            tf = 2.0 * M * n * k / (ms * 1e-3) / 1e12
            out[f"{kind}/{name}/{label}"] = {"ms": ms, "tflops": tf, "t_start": t0, "t_end": time.time()}
            print(f"{kind:8s} {name:8s} {label:9s} {ms:7.3f} ms {tf:6.0f} TFLOP/s", flush=True)
        time.sleep(1.0)
json.dump(out, open(sys.argv[1], "w"), indent=1)
