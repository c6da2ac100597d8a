# SPDX-License-Identifier: Apache-2.0
"""gpurt against Hugging Face transformers on the same checkpoints.

One model per invocation (scripts/gpu_hf_check.sh runs each in its own
process, so one failing cannot take the others down):

    hf_check.py model NAME --llama build/llama --work DIR --out DIR
    hf_check.py report --out DIR

`model` creates a random-initialised transformers model of NAME's shapes
(built directly on the device in bf16; the norms' weights and the biases
perturbed so that they matter), writes it with save_pretrained
(safetensors, bf16; sharded when large), times from_pretrained, computes
the reference logits of a prompt followed by teacher-forced tokens in
bf16 and in float32 (the bf16 noise), runs gpurt's llama command on the
same directory with the same ids (-prompt-file, -force-file, -logits-out)
and compares, per step and batch:

  rel      max |gpurt - hf32| / max |hf32|     (gpurt against float32)
  rel_bf16 max |gpurt - hf16| / max |hf32|     (against transformers bf16)
  noise    max |hf16 - hf32| / max |hf32|      (transformers bf16 vs float32)
  argmax   gpurt's argmax = hf32's where hf32's top-2 margin exceeds the
           step's absolute noise (max |hf16 - hf32|)

Step 0 is the prefill's last-token logits; step k >= 1 the decode step
that fed the (k-1)-th forced token. A model passes when every step's rel
is at most NOISE_FACTOR times the model's bf16 noise band (the largest
per-step noise at that batch) and every checked argmax agrees. Results:
OUT/NAME.json; `report` merges them into OUT/hf_check.json and
OUT/hf_check.md.
"""

import argparse
import json
import os
import subprocess
import sys
import time

NOISE_FACTOR = 1.5


def llama3_rope(factor, original_max):
    """Llama 3's rope scaling (low and high frequency factors 1 and 4)."""
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": original_max}


# name -> (family, config kwargs, shard size)
MODELS = {
    # Llama-3.2-1B shapes (tied embeddings, llama3 rope scaling)
    "llama-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=64, vocab_size=128256, rms_norm_eps=1e-5,
                               max_position_embeddings=131072, tie_word_embeddings=True,
                               rope_theta=500000.0, rope_scaling=llama3_rope(32.0, 8192)),
                 "5GB"),
    # Llama-3.1-8B shapes
    "llama-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, vocab_size=128256, rms_norm_eps=1e-5,
                               max_position_embeddings=131072, tie_word_embeddings=False,
                               rope_theta=500000.0, rope_scaling=llama3_rope(8.0, 8192)),
                 "5GB"),
    # Qwen2.5-0.5B shapes (q/k/v biases, tied embeddings, head_dim 64)
    "qwen2-small": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                 num_key_value_heads=2, vocab_size=151936, rms_norm_eps=1e-6,
                                 max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1000000.0),
                    "5GB"),
    # CPU checks of this script (the mock backend): tiny shapes
    "tiny-llama": ("llama", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=64, vocab_size=512, rms_norm_eps=1e-5,
                                 max_position_embeddings=4096, tie_word_embeddings=False, rope_theta=500000.0,
                                 rope_scaling=llama3_rope(8.0, 32)),
                   "200KB"),
    "tiny-qwen2": ("qwen2", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                                 num_key_value_heads=1, vocab_size=512, rms_norm_eps=1e-6,
                                 max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1000000.0),
                   "5GB"),
}


def log(*a):
    print("hf_check:", *a, flush=True)


class Timer:
    def __init__(self, what, times, sync=None):
        self.what, self.times, self.sync = what, times, sync

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.sync:
            self.sync()
        dt = time.perf_counter() - self.t0
        self.times[self.what] = round(dt, 3)
        log(f"{self.what}: {dt:.2f} s" + (" (failed)" if exc[0] else ""))


def make_config(family, kw):
    import transformers
    kw = dict(kw)
    rope = {"rope_type": "default", "rope_theta": kw.pop("rope_theta")}
    rope.update(kw.pop("rope_scaling", {}) or {})
    cls = transformers.LlamaConfig if family == "llama" else transformers.Qwen2Config
    try:  # transformers 5: rope_parameters
        cfg = cls(rope_parameters=rope, **kw)
    except TypeError:
        legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
        cfg = cls(rope_theta=rope["rope_theta"], rope_scaling=legacy if legacy["rope_type"] != "default" else None, **kw)
    return cfg


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))


def run_model(a):
    import numpy as np
    import torch
    import transformers

    family, kw, shard = MODELS[a.name]
    dev = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    res = {"model": a.name, "family": family, "config": kw, "device": a.device, "torch": torch.__version__,
           "transformers": transformers.__version__, "prompt": a.prompt, "decode_steps": a.steps,
           "batches": a.batches, "noise_factor": NOISE_FACTOR, "times_s": {}}
    times = res["times_s"]
    out_json = os.path.join(a.out, a.name + ".json")

    def save():
        with open(out_json, "w") as f:
            json.dump(res, f, indent=1)

    save()
    mdir = os.path.join(a.work, a.name)
    os.makedirs(mdir, exist_ok=True)
    cls = transformers.LlamaForCausalLM if family == "llama" else transformers.Qwen2ForCausalLM
    cfg = make_config(family, kw)
    torch.manual_seed(1234)
    with Timer("create", times, sync):
        with torch.device(dev):
            try:
                model = cls._from_config(cfg, dtype=torch.bfloat16)
            except TypeError:  # an older spelling
                model = cls._from_config(cfg, torch_dtype=torch.bfloat16)
        g = torch.Generator(device=dev).manual_seed(99)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:  # RMSNorm weights: not all ones
                    p.copy_(1 + 0.2 * (torch.rand(p.shape, generator=g, device=dev) * 2 - 1))
                elif n.endswith(".bias"):  # biases: not all zeros
                    p.copy_(0.1 * torch.randn(p.shape, generator=g, device=dev))
        model.eval()
    res["params"] = sum(p.numel() for p in model.parameters())
    log(f"{a.name}: {res['params'] / 1e9:.3f} B parameters on {dev}")
    with Timer("save_pretrained", times):
        model.save_pretrained(mdir, max_shard_size=shard)
    res["files"] = sorted(os.listdir(mdir))
    res["file_bytes"] = dir_bytes(mdir)
    del model
    if sync:
        torch.cuda.empty_cache()
    save()

    # transformers' load, from the page cache (the files were just written)
    with Timer("hf_from_pretrained", times, sync):
        try:
            model = cls.from_pretrained(mdir, dtype=torch.bfloat16, device_map=a.device)
        except ValueError as e:  # no accelerate (device_map needs it): load, then move
            log(f"from_pretrained with device_map: {e}; loading then moving")
            model = cls.from_pretrained(mdir, dtype=torch.bfloat16).to(dev)
    if next(model.parameters()).dtype != torch.bfloat16:
        raise SystemExit(f"from_pretrained gave {next(model.parameters()).dtype}, not bfloat16")
    model.eval()
    res["hf_load_gbps"] = round(res["file_bytes"] / times["hf_from_pretrained"] / 1e9, 3)

    B = max(a.batches)
    V = kw["vocab_size"]
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, V, (B, a.prompt + a.steps), generator=gen)
    prompt, force = ids[:, :a.prompt], ids[:, a.prompt:]
    pf, ff = os.path.join(mdir, "prompt_ids.txt"), os.path.join(mdir, "force_ids.txt")
    for path, t in ((pf, prompt), (ff, force)):
        with open(path, "w") as f:
            for row in t.tolist():
                f.write(",".join(map(str, row)) + "\n")
    keep = a.steps + 1

    def ref():
        with torch.no_grad():
            lg = model(input_ids=ids.to(dev), logits_to_keep=keep, use_cache=False).logits
        return lg.float().cpu().numpy()  # [B][keep][V]

    with Timer("hf_bf16_forward", times, sync):
        hf16 = ref()
    with Timer("hf_to_f32", times, sync):
        model = model.float()
    with Timer("hf_f32_forward", times, sync):
        hf32 = ref()
    del model
    if sync:
        torch.cuda.empty_cache()
    save()

    # gpurt: both batches, eager and graph, in one process
    lo = os.path.join(a.work, a.name + "_logits_{batch}_{mode}.f32")
    cmd = [a.llama, "-model", mdir, "-backend", a.backend, "-batch", ",".join(map(str, a.batches)), "-modes", a.modes,
           "-warmup", "0", "-steps", str(keep), "-prompt-file", pf, "-force-file", ff, "-logits-out", lo, "-progress", "line"]
    if a.plugin_path:
        cmd += ["-plugin-path", a.plugin_path]
    log("run:", " ".join(cmd))
    with Timer("gpurt_process", times):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.gpurt_timeout)
    sys.stderr.write(p.stderr[-4000:])
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    res["gpurt_rc"] = p.returncode
    for l in lines:
        if l.get("kind") == "load":
            res["gpurt_load_s"] = round(l["seconds"], 3)
            res["gpurt_load_gbps"] = round(l["gbps"], 3)
            res["gpurt_load_gb"] = round(l["gb"], 3)
        if l.get("kind") == "error":
            res.setdefault("gpurt_errors", []).append(l["error"])
    if p.returncode != 0:
        res["error"] = f"llama exited {p.returncode}: {p.stderr.strip()[-600:]}"
        save()
        raise SystemExit(res["error"])
    toks = {}
    for l in lines:
        if l.get("kind") == "step":
            toks.setdefault((l["batch"], l["mode"]), []).append(l["tokens"])

    # comparisons
    res["runs"] = []
    ok = True
    for b in a.batches:
        r32, r16 = hf32[:b], hf16[:b]  # [b][keep][V]
        for mode in a.modes.split(","):
            path = lo.replace("{batch}", str(b)).replace("{mode}", mode)
            gp = np.fromfile(path, dtype="<f4").reshape(keep, b, V).transpose(1, 0, 2)
            steps = []
            band = 0.0
            for s in range(keep):
                g32, g16, gg = r32[:, s], r16[:, s], gp[:, s]
                scale = float(np.abs(g32).max())
                noise_abs = float(np.abs(g16 - g32).max())
                band = max(band, noise_abs / scale)
                top2 = np.sort(np.partition(g32, -2, axis=1)[:, -2:], axis=1)
                margin = top2[:, 1] - top2[:, 0]
                am32, amgp, am16 = g32.argmax(1), gg.argmax(1), g16.argmax(1)
                checked = margin > noise_abs
                steps.append({
                    "step": s,
                    "rel": float(np.abs(gg - g32).max()) / scale,
                    "rel_bf16": float(np.abs(gg - g16).max()) / scale,
                    "noise": noise_abs / scale,
                    "max_abs_logit": scale,
                    "argmax_checked": int(checked.sum()),
                    "argmax_agree": int((checked & (am32 == amgp)).sum()),
                    "argmax_agree_all": int((am32 == amgp).sum()),
                    "hf_bf16_argmax_agree_all": int((am32 == am16).sum()),
                    "finite": bool(np.isfinite(gg).all()),
                })
            # the tokens gpurt printed are its argmax (greedy picks)
            tk = np.array(toks.get((b, mode), []))
            tokens_match = bool(tk.shape == (keep, b) and (tk.T == gp.argmax(2)).all())
            worst = max(st["rel"] for st in steps)
            chk = sum(st["argmax_checked"] for st in steps)
            agr = sum(st["argmax_agree"] for st in steps)
            within = all(st["rel"] <= NOISE_FACTOR * band for st in steps) and all(st["finite"] for st in steps)
            run = {"batch": b, "mode": mode, "noise_band": band, "worst_rel": worst,
                   "worst_rel_step": max(range(keep), key=lambda i: steps[i]["rel"]),
                   "prefill_rel": steps[0]["rel"], "prefill_noise": steps[0]["noise"],
                   "median_rel": float(np.median([st["rel"] for st in steps])),
                   "median_noise": float(np.median([st["noise"] for st in steps])),
                   "argmax_checked": chk, "argmax_agree": agr,
                   "argmax_agree_all": sum(st["argmax_agree_all"] for st in steps), "argmax_total": keep * b,
                   "hf_bf16_argmax_agree_all": sum(st["hf_bf16_argmax_agree_all"] for st in steps),
                   "tokens_match_logits": tokens_match, "within_noise": within, "argmax_ok": agr == chk,
                   "pass": within and agr == chk and tokens_match, "steps": steps}
            ok = ok and run["pass"]
            res["runs"].append(run)
            log(f"{a.name} batch {b} {mode}: worst rel {worst:.3e} (step {run['worst_rel_step']}), noise band {band:.3e}, "
                f"prefill rel {run['prefill_rel']:.3e} / noise {run['prefill_noise']:.3e}, argmax {agr}/{chk} "
                f"(all {run['argmax_agree_all']}/{keep * b}), {'PASS' if run['pass'] else 'FAIL'}")
    for f in os.listdir(a.work):
        if f.startswith(a.name + "_logits_"):
            os.remove(os.path.join(a.work, f))
    res["pass"] = ok
    save()
    return 0 if ok else 1


def report(a):
    rows, models = [], []
    for name in a.names:
        p = os.path.join(a.out, name + ".json")
        if not os.path.exists(p):
            models.append({"model": name, "error": "no result (the step did not start or was killed)"})
            continue
        with open(p) as f:
            r = json.load(f)
        models.append(r)
    md = ["# gpurt against transformers", "",
          f"Logits per step: rel = max|gpurt - hf_f32| / max|hf_f32|; noise = the same for transformers bf16 against "
          f"transformers float32 in the same run; pass: every step's rel <= {NOISE_FACTOR} x the largest per-step noise "
          f"(the band), every argmax agrees where hf_f32's top-2 margin exceeds the step's noise, and the tokens gpurt "
          f"printed are its logits' argmax. Step 0 is the prefill's last token.", "",
          "| model | batch | mode | worst rel (step) | noise band | median rel / noise | prefill rel / noise | argmax checked | all argmax (hf bf16) | pass |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in models:
        if "runs" not in r:
            md.append(f"| {r['model']} | | | | | | | | | FAIL: {r.get('error', 'incomplete: ' + ', '.join(r.get('times_s', {})))} |")
            continue
        for x in r["runs"]:
            md.append(f"| {r['model']} | {x['batch']} | {x['mode']} | {x['worst_rel']:.2e} ({x['worst_rel_step']}) | "
                      f"{x['noise_band']:.2e} | {x['median_rel']:.2e} / {x['median_noise']:.2e} | "
                      f"{x['prefill_rel']:.2e} / {x['prefill_noise']:.2e} | {x['argmax_agree']}/{x['argmax_checked']} | "
                      f"{x['argmax_agree_all']}/{x['argmax_total']} ({x['hf_bf16_argmax_agree_all']}) | "
                      f"{'yes' if x['pass'] else 'NO'} |")
    md += ["", "| model | params (B) | files (GB) | gpurt load s (GB/s) | transformers from_pretrained s (GB/s) | create s | save s |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in models:
        t = r.get("times_s", {})
        if "file_bytes" not in r:
            continue
        gl = f"{r['gpurt_load_s']:.2f} ({r['gpurt_load_gbps']:.2f})" if "gpurt_load_s" in r else "-"
        hl = f"{t['hf_from_pretrained']:.2f} ({r['hf_load_gbps']:.2f})" if "hf_from_pretrained" in t else "-"
        md.append(f"| {r['model']} | {r.get('params', 0) / 1e9:.3f} | {r['file_bytes'] / 1e9:.2f} | {gl} | {hl} | "
                  f"{t.get('create', 0):.1f} | {t.get('save_pretrained', 0):.1f} |")
    # a few steps of each model's largest batch, eager: the per-step view
    md += ["", "Per step (largest batch, eager; all steps in OUT/NAME.json):", "",
           "| model | step | rel | rel vs hf bf16 | noise | argmax agree / checked |", "| --- | --- | --- | --- | --- | --- |"]
    for r in models:
        runs = [x for x in r.get("runs", []) if x["mode"] == "eager"]
        if not runs:
            continue
        x = max(runs, key=lambda x: x["batch"])
        n = len(x["steps"])
        for s in sorted({0, 1, 2, 4, 8, 16, 32, n - 1} & set(range(n))):
            st = x["steps"][s]
            md.append(f"| {r['model']} b{x['batch']} | {s} | {st['rel']:.2e} | {st['rel_bf16']:.2e} | {st['noise']:.2e} | "
                      f"{st['argmax_agree']}/{st['argmax_checked']} |")
    allpass = all(r.get("pass") for r in models)
    md += ["", f"Overall: {'PASS' if allpass else 'FAIL'}"]
    slim = [{k: v for k, v in r.items() if k != "runs"} | {"runs": [{k: v for k, v in x.items() if k != "steps"}
                                                                    for x in r.get("runs", [])]} for r in models]
    with open(os.path.join(a.out, "hf_check.json"), "w") as f:
        json.dump({"pass": allpass, "models": slim}, f, indent=1)
    with open(os.path.join(a.out, "hf_check.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if allpass else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model")
    m.add_argument("name", choices=sorted(MODELS))
    m.add_argument("--llama", default="build/llama")
    m.add_argument("--backend", default="cuda")
    m.add_argument("--plugin-path", default="build")
    m.add_argument("--device", default="cuda")
    m.add_argument("--work", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--prompt", type=int, default=512)
    m.add_argument("--steps", type=int, default=64)
    m.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    m.add_argument("--modes", default="eager,graph")
    m.add_argument("--gpurt-timeout", type=int, default=240)
    r = sub.add_parser("report")
    r.add_argument("--out", required=True)
    r.add_argument("names", nargs="+")
    a = ap.parse_args()
    if a.cmd == "report":
        return report(a)
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    return run_model(a)


if __name__ == "__main__":
    sys.exit(main())
