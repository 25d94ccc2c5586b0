"""A decode-like loop to record with ``tokentrace record``, with a host stall injected at known steps.

Each step: schedule (Python), a forward pass of ``--layers`` layers (bf16 matmuls and a ReLU),
greedy sampling, and ``.tolist()`` of the tokens (the host waits for the step, as a decode loop
does), then ``tokentrace.step()``. Every ``--stall-every``-th step, ``flush_request_log`` sleeps
``--stall-ms`` before the step's launches: the GPU has nothing to run meanwhile, and a correct
analysis names that function as the cause of the gap.

    tokentrace record -o profiles/demo_torch --gpu torch --skip 10 --steps 60 -- \\
        python examples/record_demo.py --steps 80 --stall-every 20 --stall-ms 8
    tokentrace record -o profiles/demo_proton --gpu proton --skip 10 --steps 60 -- \\
        python examples/record_demo.py --steps 80 --stall-every 20 --stall-ms 8 --activation triton

``--activation triton`` runs the ReLU as a Triton kernel: Proton before triton 3.9 writes no clock
anchor, and tokentrace then estimates the clock offset from the Triton launches and kernels (8 at
least), which a program of cuBLAS and PyTorch kernels alone does not have.

With ``--truth FILE`` it writes each stall's step and Unix-epoch ns span (``stalls[]``) there.
"""
import argparse
import json
import time

import torch
import triton
import triton.language as tl

import tokentrace


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0).to(y_ptr.dtype.element_ty), mask=mask)


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def flush_request_log(ms):
    time.sleep(ms / 1000.0)  # the injected stall: blocking I/O on the scheduler thread


def schedule(step, batch):
    return [(step, i) for i in range(batch)]


def decode_step(weights, tokens, emb, act):
    x = emb[tokens]
    for w_up, w_down in weights:
        x = x + act(x @ w_up) @ w_down
    return torch.argmax(x @ emb.T, dim=-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--stall-every", type=int, default=20)
    ap.add_argument("--stall-ms", type=float, default=8.0)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--activation", choices=["torch", "triton"], default="torch")
    ap.add_argument("--truth", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16) * 0.02  # noqa: E731
    weights = [(g(args.d, 2 * args.d), g(2 * args.d, args.d)) for _ in range(args.layers)]
    emb = g(8192, args.d)
    tokens = torch.randint(0, 8192, (args.batch,), device="cuda")
    act = relu if args.activation == "triton" else torch.relu
    stalls = []
    for step in range(args.steps):
        schedule(step, args.batch)
        if args.stall_every and step % args.stall_every == args.stall_every - 1:
            t0 = time.time_ns()
            flush_request_log(args.stall_ms)
            stalls.append({"step": step, "frame": "flush_request_log", "start_ns": t0, "end_ns": time.time_ns()})
        tokens = decode_step(weights, tokens, emb, act)
        tokens.tolist()  # the host waits for the step's tokens
        tokentrace.step()
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump({"stalls": stalls, "settings": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
