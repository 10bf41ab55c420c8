"""`make bench`: predictions against what the fix saved, on the real fix pairs in fixtures/real (each a run
and its twin with the fix: README there), and `nsanalyze whatif`'s own time on the largest bench export.

Per pair: the base report's first program finding, its estimated savings per step (the finding's savings
over the steps in the window), the `whatif` replay of the change the fix stands for where one maps, and
the actual saving: the difference of the mean GPU step periods (steps.mean_ns, what a run costs).
Writes the tables into docs/performance.md between the calibration markers."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = ROOT / "fixtures" / "real"

# the whatif change of a fix that keeps the steps' data on the GPU (host-data's)
DATA_CHANGE = {"data_on_gpu": True}

# (base, fixed, whatif change, what the fix was, the check whose finding the fix answers)
PAIRS = [
    ("graphs_eager", "graphs_after", {"graph": True}, "the step captured as one CUDA graph", "launch-overhead"),
    ("loader_inline", "loader_workers", None, "DataLoader workers, pinned memory", "host-data"),
    ("attn_naive", "attn_sdpa", None, "scaled_dot_product_attention", "attention-unfused"),
    ("cnn_nchw", "cnn_cl", None, "channels_last", "layout-conversion"),
    ("mlp_eager", "mlp_compile", None, "torch.compile", "unfused-elementwise"),
    ("transfer_pageable", "transfer_pinned", {"pinned": True}, "pinned host memory", "pageable-memcpy"),
    ("alloc_churn", "alloc_cached", {"remove": ("allocator",)}, "no empty_cache() each step", "allocator-churn"),
    ("histlog_every10", "histlog_off", {"outliers": True}, "no histogram logging", "slow-steps"),
    ("nested_phases", "nested_phases_nockpt", {"outliers": True}, "no checkpoint", "non-step-phase"),
    ("hostsync_every1", "hostsync_every20", {"remove": ("sync",)}, "a sync every 20 steps, not every step",
     "host-sync"),
    ("matmul_sync", "matmul_async", {"remove": ("sync",)}, "no `.item()` each step: the host runs ahead",
     "host-sync"),
    ("shard_shards", "shard_prefetched", {"outliers": True}, "the next shard decoded ahead in a thread",
     "slow-steps"),
    ("pinned_churn", "pinned_once", {"remove": ("pinned-alloc",)}, "the staging buffer pinned once",
     "pinned-alloc-churn"),
    ("opt_loop", "opt_graph", {"graph": True}, "the whole step captured once as a CUDA graph, AdamW foreach=False "
     "and capturable", "launch-overhead"),
    # not the first finding's change: fused AdamW removes the optimizer's 1,024 launches a step and fuses its
    # kernels, the forward's and backward's launches stay; unfused-optimizer cannot tell a Python-loop optimizer's
    # kernels (generic element-wise ones) from the model's here and says so (not judged); launch-loop finds the loop
    # by its launches and names Adam's update by its kernels (fused=True)
    ("opt_loop", "opt_fused", None, "fused AdamW, not a foreach=False per-parameter loop: a different change from "
     "the first finding's (one graph launch a step)", "launch-loop"),
    # the same loop under nsys --pytorch=autograd-nvtx: its optimizer's launches are known by their range
    ("opt_loop_annot", "opt_fused", {"fuse": ("optimizer",)}, "fused AdamW; the loop recorded under PyTorch's "
     "annotations (Optimizer.step# ranges)", "unfused-optimizer"),
    ("fp32", "tf32", None, "TF32 matmuls: allow_tf32, precision 'high'", "low-tensor-activity"),
    # round eight (fixtures/real/record_round8.sh, record_round8_cl.sh, round8_train.py): ordinary mistakes
    # nobody tuned the checks to, recorded after the checks were written and compared blind (no check changed)
    ("itemlog_every1", "itemlog_every50", {"remove": ("sync",)}, "the running loss and accuracy summed on the "
     "GPU and read every 50 steps, not `.item()` twice a step", "host-sync"),
    ("itemlog_every50", "itemlog_cl", None, "model and images in channels_last (the base's first finding's change)",
     "layout-conversion"),
    ("augment_w0", "augment_w4", None, "DataLoader num_workers=4 and pin_memory, not augmentation in the "
     "training process", "host-data"),
    ("xfmr_fp32", "xfmr_bf16", None, "torch.autocast(bfloat16) on the forward and loss", "low-tensor-activity"),
    # round 48 (fixtures/real/blind48_train.py, record_blind48.sh): written as users write them and recorded after
    # the checks, compared blind (no check changed for them)
    ("blind_persample_base", "blind_persample_fix", None, "ResNet-18 inference: one batched forward and one `.cpu()` "
     "a step, not a forward and a `.cpu()` per image", "launch-overhead"),
    ("blind_heads_base", "blind_heads_fix", None, "64 task heads as two batched products, not a Python loop over a "
     "ModuleList", "launch-overhead"),
    ("blind_lossbyhand_base", "blind_lossbyhand_fix", None, "`F.cross_entropy(label_smoothing=0.1)`, not the "
     "label-smoothed loss written out", "unfused-elementwise"),
    # round 49, blind (fixtures/real/blind49_train.py, record_blind49.sh): three more, recorded after the checks and
    # compared blind (no check changed for them). hostmetrics: the fix removes a `.tolist()` sync and the host's
    # Python loop after it (host-compute: the GPU waits on that code). emaloop: launch-overhead's figure stands for
    # one graph launch a step, a bigger change than the fix; launch-loop (written after this round, from it) prices
    # the EMA loop's launches alone
    ("blind_hostmetrics_base", "blind_hostmetrics_fix", DATA_CHANGE, "token metrics as a confusion matrix "
     "accumulated on the GPU and read every 50 steps, not `.tolist()` and a Python loop over the tokens every step",
     "host-data"),
    ("blind_cpumask_base", "blind_cpumask_fix", None, "the causal mask built once as a buffer on the GPU, not on the "
     "CPU and copied in every attention layer each step", "host-compute"),
    ("blind_emaloop_base", "blind_emaloop_fix", {"fuse": ("loop",)}, "the EMA of ViT-B/16's weights as one "
     "`torch._foreach_lerp_`, not a Python loop over the 152 parameters", "launch-loop"),
    # round 50, blind (fixtures/real/blind50_train.py, record_blind50.sh): recorded after launch-loop was written,
    # by a helper who had not read it; compared with one change made for them (memsets left out of a loop's motif:
    # PyTorch zeroes some norms' scratch and not others, which broke gradclip's run of norms)
    ("blind_gradclip_base", "blind_gradclip_fix", {"fuse": ("loop",)}, "`clip_grad_norm_(foreach=True)`, not the "
     "clipping written by hand over the 149 gradients (a norm each, then a `mul_` each)", "launch-loop"),
    ("blind_embtables_base", "blind_embtables_fix", {"fuse": ("loop",)}, "one embedding table with per-table "
     "offsets, not a Python loop over 48 `nn.Embedding` tables", "launch-loop"),
    # round 51 (fixtures/real/record_graph51.sh): launch-overhead's own change on three blind bases whose users made a
    # narrower fix: the mistake kept, the step's GPU work captured once as a CUDA graph and replayed. One call, base,
    # graph, graph, base per program; each base is paired with the graph run beside it (the graph runs agree within
    # 0.03 ms, the host-bound bases moved 0.8-5.2 ms), each base's prediction made on that base
    *[(f"graph51_{c}_base{i}", f"graph51_{c}_graph{i}", {"graph": True},
       f"{what}; the call's {('first', 'last')[i - 1]} base and graph runs", "launch-overhead")
      for c, what in (("emaloop", "ViT-B/16's step, its EMA loop kept, captured as one CUDA graph (AdamW capturable)"),
                      ("gradclip", "the GPT's step, its clipping by hand kept, captured as one CUDA graph (fused "
                       "AdamW, capturable)"),
                      ("hostmetrics", "the tagger's forward, backward and AdamW (capturable) as one CUDA graph, the "
                       "`.tolist()` metrics left outside it"))
      for i in (1, 2)],
    # round 51, blind (fixtures/real/blind51_train.py, record_blind51.sh): base, fix, fix2, base2; each base with the
    # fix run beside it. No check stands for padmax's change (the fix's finding: none): its fix is slower by the
    # mean (the first step at each of 16 new padded lengths loads kernels, 120-170 ms): what the table shows is that
    # it tests no finding; past those steps it saved 0.47 ms a step. cudnnbench's is autotuning's (written in round
    # 52 from this pair)
    *[(f"blind_{c}_{b}", f"blind_{c}_{f}", change, f"{what}; the call's {when} base and fix runs", answers)
      for c, what, change, answers in (
          ("padmax", "each batch padded to its longest sentence (a multiple of 8), not to 512 tokens", None, None),
          ("cudnnbench", "`cudnn.benchmark` left off, not on while the input length changes every step",
           {"untune": True}, "autotuning"))
      for b, f, when in (("base", "fix", "first"), ("base2", "fix2", "last"))],
    # round 52 (fixtures/real/record_tune52.sh, tune52_train.py): a second program for autotuning, recorded after the
    # check was written from cudnnbench and not tuned to it: multi-scale resnet18, a new image size each step
    *[(f"tune52_ms_base{i}", f"tune52_ms_fix{i}", {"untune": True}, "`cudnn.benchmark` left off, not on while the "
       f"image size changes every step (resnet18); the call's {when} base and fix runs", "autotuning")
      for i, when in ((1, "first"), (2, "last"))],
    # round 52 (fixtures/real/record_trit52.sh, trit52_train.py): Triton's autotuner keyed on a length that changes
    # every step, and timing code left in a loop (the trials' pattern with nothing warmed up: no tuner; event-timing's
    # since round 53, written from this pair)
    ("trit52_triton_base1", "trit52_triton_fix1", {"untune": True}, "`@triton.autotune(key=[])`, not keyed on a "
     "sequence length that changes every step", "autotuning"),
    ("trit52_timed_base", "trit52_timed_fix", {"untime": True}, "no event pair timed and synchronized around "
     "each of 8 layers every step", "event-timing"),
    # round 53, blind (fixtures/real/record_time53.sh, time53_train.py: recorded by a helper after event-timing was
    # written from trit52's MLP, not tuned to): phases of a GPT and stages of a ResNet-50 timed and synchronized every
    # step; the first base and fix of each call
    *[(f"time53_{p}_base", f"time53_{p}_fix", {"untime": True}, what, "event-timing") for p, what in (
        ("gpt", "no event pair timed and synchronized around each of 3 phases (forward, backward, optimizer) every "
                "step, host-bound GPT"),
        ("resnet", "no event pair timed and synchronized around each of 5 stages every step, ResNet-50 at batch 64 "
                   "(host-bound)"),
        ("resnet256", "no event pair timed and synchronized around each of 5 stages every step, ResNet-50 at batch "
                      "256 (GPU-bound)"))],
    # round 53, blind (fixtures/real/record_sync53.sh, sync53_train.py): the same programs' phases and stages timed
    # with time.perf_counter() between torch.cuda.synchronize() calls every step: host-sync's, which was not changed
    *[(f"sync53_{p}_base", f"sync53_{p}_fix", {"remove": ("sync",)}, what, "host-sync") for p, what in (
        ("gpt", "no torch.cuda.synchronize() around each of 3 phases every step (host timers), host-bound GPT"),
        ("resnet256", "no torch.cuda.synchronize() around each of 5 stages every step (host timers), ResNet-50 at "
                      "batch 256 (GPU-bound)"))],
    # Kineto traces (torch.profiler, 6 active steps) of two of the twins above: a `_kineto` name is a
    # fixtures/real/NAME.json.gz trace, replayed as the exports are since round 54
    ("graphs_eager_kineto", "graphs_after_kineto", {"graph": True}, "the step captured as one CUDA graph; "
     "torch.profiler traces", "launch-overhead"),
    ("alloc_churn_kineto", "alloc_cached_kineto", {"remove": ("allocator",)}, "no empty_cache() each step; "
     "torch.profiler traces", "allocator-churn"),
    # round 54, blind (fixtures/real/record_kin54.sh: recorded by a helper after the replay was extended to traces):
    # four twins recorded before under nsys, now under torch.profiler (8 steps), base1, fix1, fix2, base2 in one call
    *[(f"kin54_{p}_base{i}_kineto", f"kin54_{p}_fix{i}_kineto", change, f"{what}; torch.profiler traces, "
       f"{'first' if i == 1 else 'second'} pair", check)
      for p, change, what, check in (
          ("time53", {"untime": True}, "no event pair timed and synchronized around each of 5 stages every step, "
                                       "ResNet-50 at batch 256", "event-timing"),
          ("sync53", {"remove": ("sync",)}, "no torch.cuda.synchronize() around each of 5 stages every step (host "
                                            "timers), ResNet-50 at batch 256", "host-sync"),
          ("emaloop", {"fuse": ("loop",)}, "the EMA of ViT-B/16's weights as one `torch._foreach_lerp_`, not a "
                                           "Python loop over the 152 parameters", "launch-loop"),
          ("itemlog", {"remove": ("sync",)}, "the running loss and accuracy read every 50 steps, not `.item()` twice "
                                             "a step", "host-sync"))
      for i in (1, 2)],
    # round 55 (fixtures/real/record_fuse55.sh, fuse55_train.py): eager CNN training (channels_last, bf16, batch 256)
    # against torch.compile; unfused-normalization was written from the ResNet-50, the MobileNetV2 is blind
    *[(f"fuse55_{p}_base{i}", f"fuse55_{p}_fix{i}", None, f"torch.compile of {what} (BatchNorm fused with its ReLU and "
       f"add); {'first' if i == 1 else 'second'} pair", "unfused-normalization")
      for p, what in (("resnet", "ResNet-50"), ("mobilenet", "MobileNetV2 (blind)")) for i in (1, 2)],
    # round 56 (fixtures/real/record_fuse56.sh, fuse56_train.py): eager transformer training (bf16) against
    # torch.compile; the check was widened to the other short runs from the GPT, the BERT is blind (its compile
    # also padded the vocabulary GEMMs: a saving beyond fusion)
    *[(f"fuse56_{p}_base{i}", f"fuse56_{p}_fix{i}", None, f"torch.compile of {what} (LayerNorm, dropout, GELU and "
       f"adds fused); {'first' if i == 1 else 'second'} pair", "unfused-normalization")
      for p, what in (("gpt", "a GPT-2-small-like decoder"), ("bert", "a BERT-base-like encoder (blind)"))
      for i in (1, 2)],
    # round 56 (fixtures/real/record_blind56.sh, blind56_train.py): two mistakes a helper chose and recorded blind;
    # device-copies was written from the kvcat pair after; no check speaks for the probe's needless backward
    *[(f"blind56_{p}_base{i}", f"blind56_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (("kvcat", "a preallocated KV cache written in place, not grown by torch.cat each token",
                              "device-copies"),
                             ("probe", "a frozen ViT backbone without gradients (requires_grad_(False), no_grad), "
                                       "not a backward through it every step", None))
      for i in (1, 2)],
    # round 56 (fixtures/real/record_copy56.sh, copy56_train.py), recorded after device-copies and unaligned-gemm
    # were written: an eval loop's logits grown by torch.cat (its cat became device memcpys past 2^31 elements), and
    # the GPT's vocabulary padded (unaligned-gemm speaks, its saving not measured: info)
    *[(f"copy56_{p}_base{i}", f"copy56_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (("catlog", "the epoch's logits written into a store allocated once, not grown by "
                                        "torch.cat each batch", "device-copies"),
                             ("vocab", "vocab_size 50304, not 50257 (the head's GEMMs on full-width loads)",
                              "unaligned-gemm"))
      for i in (1, 2)],
    # round 57 (fixtures/real/record_blind57.sh, blind57_train.py): two mistakes a helper chose and recorded blind;
    # transfer-bound was widened from the landcover pair after, and activation-recompute written from the lm pair
    *[(f"blind57_{p}_base{i}", f"blind57_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (("lm", "activation checkpointing off, not the forward of every block run again in the "
                                    "backward", "activation-recompute"),
                             ("landcover", "the next batch copied on a side stream while the step computes, not "
                                           "on the compute stream at the top of each step", "transfer-bound"))
      for i in (1, 2)],
    # round 57 (fixtures/real/record_blind58.sh, blind58_train.py): two more mistakes a helper chose and recorded blind;
    # repeated-backward was written from the multitask pair after (activation-recompute had taken its passes for a
    # rerun); the LSTM cell loop is launch-loop's
    *[(f"blind58_{p}_base{i}", f"blind58_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (("multitask", "one backward of the summed task losses, not one backward(retain_graph=True) "
                                           "per loss", "repeated-backward"),
                             ("lstm", "one cuDNN nn.LSTM, not nn.LSTMCell stepped over the frames in Python",
                              "launch-loop"))
      for i in (1, 2)],
    # round 57 (fixtures/real/record_kv57.sh): blind56's fixed decoder, whose attention cuDNN compiles for each new KV
    # length, against the same with cuDNN's SDPA off (recorded after runtime-compilation was written)
    *[(f"kv57_base{i}", f"kv57_fix{i}", {"unbuild": True}, f"cuDNN's SDPA off (precompiled attention kernels), not a "
       f"kernel compiled for each new KV length; {'first' if i == 1 else 'second'} pair", "runtime-compilation")
      for i in (1, 2)],
    # round 63 (fixtures/real/record_blind61.sh, blind61_train.py: written in round 61, recorded in round 63 before any
    # check looked at it): two mistakes a helper chose blind. Anomaly detection's per-gradient read-backs show as
    # launch wait, host code and syncs; host-sync's advice names it since round 63, and its change (the syncs gone
    # with the checks they wait on) is the fix's but for the forward's stack traces (host code, which it keeps). On
    # the H200 the deterministic index_add_ (a sort, then index_put_) was faster than the atomic one, so the "fix"
    # costs 4.1 ms a step and tests only that no finding promises a saving from it
    *[(f"blind61_{p}_base{i}", f"blind61_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, change, check in (
          ("anomaly", "torch.autograd.set_detect_anomaly(True) off, not left on (a stack trace stored for every "
                      "autograd node, an isnan().any().item() read-back for every gradient)",
           {"remove": ("sync",), "uncheck": True}, "host-sync"),
          ("determ", "torch.use_deterministic_algorithms(True) off (index_add_ by atomic adds, not a sort and "
                     "index_put_)", None, None))
      for i in (1, 2)],
    # round 67 (fixtures/real/record_own67.sh, own67_train.py): a batch built in NumPy in the loop and
    # torch.cuda.empty_cache() each step, each removed alone; run 1's four modes, then run 2's, in two calls. The
    # host's NumPy time moved 42.6 -> 57.0 ms a step between the two cached runs: churn -> cached measures the
    # allocator's few ms under that noise, prebuilt -> fixed without it
    *[(f"own67_{b}{i}", f"own67_{f}{i}", change, f"{what}; run {i}", check)
      for b, f, change, what, check in (
          ("churn", "prebuilt", DATA_CHANGE, "batches built before the loop, not in NumPy each step "
           "(empty_cache kept)", "host-data"),
          ("cached", "fixed", DATA_CHANGE, "batches built before the loop, not in NumPy each step (no "
           "empty_cache)", "host-data"),
          ("prebuilt", "fixed", {"remove": ("allocator",)}, "no empty_cache() each step (batches prebuilt)",
           "allocator-churn"),
          ("churn", "cached", {"remove": ("allocator",)}, "no empty_cache() each step (the batch built in NumPy "
           "each step)", "allocator-churn"))
      for i in (1, 2)],
    # round 67, blind (fixtures/real/record_blind67.sh, blind67_train.py: written by a helper who had not read the
    # checks, recorded before any check looked at it): a dict batch of 40 small pageable columns each moved with a
    # blocking `.to("cuda")` (the pinned change was then made to drop an upload's own wait, and pageable-memcpy to
    # count the idle time under the staging calls, from this pair), and torch.distributions' argument validation
    # left on in a PPO update (a read-back and a sync per check; round 68 made host-sync name them as checks of values
    # and price them gone with their reads, kernels and calls: `--remove sync --uncheck`)
    *[(f"blind67_{p}_base{i}", f"blind67_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, change, what, check in (
          ("fields", {"pinned": True}, "the batch's 40 columns pinned and copied with non_blocking=True, not pageable "
                                       "and copied with a blocking .to('cuda')", "pageable-memcpy"),
          ("distval", {"remove": ("sync",), "uncheck": True},
           "Distribution.set_default_validate_args(False), not the argument checks of Categorical and log_prob (a "
           "read-back each) in every minibatch",
           "host-sync"))
      for i in (1, 2)],
    # round 68 (fixtures/real/record_blind68.sh, blind68_train.py): a DataLoader whose one worker cannot keep up with a
    # CNN (a targeted pair: host-wait had none), and a mistake a helper chose blind: fp32 GEMMs at PyTorch's default
    # matmul precision ("highest") in a GPT, the tensor cores idle
    # (the loader's whatif since round 69: its waits on the queue, the OS class lock-wait, gone)
    *[(f"blind68_{p}_base{i}", f"blind68_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, change, what, check in (
          ("loader", {"remove": ("lock-wait",)},
           "DataLoader(num_workers=8, persistent_workers=True, prefetch_factor=4), not num_workers=1 with "
           "NumPy decoding and augmentation in each sample", "host-wait"),
          ("gpt", None, "torch.set_float32_matmul_precision('high') (TF32 tensor-core GEMMs), not the default "
           "'highest'", "low-tensor-activity"))
      for i in (1, 2)],
    # round 69 (fixtures/real/record_blind69.sh, blind69_train.py), both mistakes a helper's blind choice, recorded on
    # an H200: a batch augmented per image in a Python loop (random flips: other numbers of kernels each step), and a
    # GCN's whole graph uploaded from pageable memory at the top of every step. Neither fix is a whatif change: the
    # first batches the work (launch-overhead's advice leads with it), the second moves the graph once
    # (pageable-memcpy's advice asks first; its saving stays pinning's)
    *[(f"blind69_{p}_base{i}", f"blind69_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("augment", "the augmentation over the whole batch at once (a gather, a mask, one normalisation), not a "
                      "Python loop over its 256 images", "launch-overhead"),
          ("graph", "the GCN's graph moved to the GPU once before the loop, not with .to('cuda') in every step",
           "pageable-memcpy"))
      for i in (1, 2)],
    # round 70's blind choice, recorded in round 72 on an H100: gc.collect() at the end of every step of a BERT
    # fine-tuning (its data set 241,247 objects), and word2vec's two 2,000,000-row tables with dense gradients
    # (dense-embedding-grad was written after this pair showed it missing: no blind test of it)
    *[(f"blind70_{p}_base{i}", f"blind70_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, change, what, check in (
          ("reviews", None, "no gc.collect() at the end of every step", "host-compute"),
          ("word2vec", None, "nn.Embedding(V, D, sparse=True), not dense gradients over both 2,000,000-row tables",
           "dense-embedding-grad"))
      for i in (1, 2)],
    # round 73's blind choice (a helper's), recorded on an H100: a tabular MLP in float64 by accident (NumPy's float64
    # and `.double()`), and a recommender whose embedding tables live on the CPU (fp64-compute was written after the
    # first pair showed it missing: no blind test of it)
    *[(f"blind71_{p}_base{i}", f"blind71_{p}_fix{i}", DATA_CHANGE if check == "host-data" else None,
       f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("fp64", "float32 data and model, not float64 from NumPy and `.double()`", "fp64-compute"),
          ("cpuemb", "the embedding tables on the GPU, not on the CPU with their rows copied up and their gradients "
                     "down each step", "host-data"))
      for i in (1, 2)],
    # round 74 (fixtures/real/record_blind72.sh, blind72_train.py): two mistakes a helper chose blind, recorded before
    # any check looked at them: a VQ-VAE whose nearest-code distances broadcast an 8 GiB intermediate (no finding
    # above info as recorded: the chain of its kernels ran into a gather no role named), and a segmentation
    # evaluation whose logits are copied whole to the host for NumPy's argmax
    *[(f"blind72_{p}_base{i}", f"blind72_{p}_fix{i}", DATA_CHANGE if check == "host-data" else None,
       f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("vqvae", "the nearest-code distances expanded into a matrix product, not broadcast over [N, K, D]",
           "unfused-elementwise"),
          ("segeval", "the argmax on the GPU and the labels copied, not the logits copied for NumPy's argmax",
           "host-data"))
      for i in (1, 2)],
    # round 74 (fixtures/real/record_blind73.sh, blind73_train.py): two more, chosen blind and recorded before any
    # check looked at them: a GCN over a dense adjacency matrix (the fix: an edge list, gather-scatter), and GPT-2
    # generation with autograd left on (the fix: torch.no_grad()). No check prices either fix's change: the first
    # findings are TF32 for the dense GEMMs and a graph for the launches, other changes
    *[(f"blind73_{p}_base{i}", f"blind73_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", None)
      for p, what in (
          ("gcn", "the adjacency as an edge list propagated by gather-scatter, not a dense N x N matrix"),
          ("lmgen", "generation under torch.no_grad(), not with autograd recording every operation"))
      for i in (1, 2)],
    # round 75 (fixtures/real/record_blind74.sh, blind74_train.py): two more, chosen blind and recorded before any
    # check looked at them: a token tagger whose loss and metrics select tokens by boolean masks (a sync each: a
    # host-bound loop where they cost little; the two pairs disagree), and a DQN whose replay buffer lives in NumPy
    # (each batch gathered on the host, uploaded from pageable memory)
    *[(f"blind74_{p}_base{i}", f"blind74_{p}_fix{i}", DATA_CHANGE if check == "host-data" else None,
       f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("masksync", "ignore_index and masked sums, not boolean-mask selections that read their size back",
           "host-sync"),
          ("replaybuf", "the replay buffer on the GPU, sampled there, not gathered in NumPy and uploaded pageable",
           "host-data"))
      for i in (1, 2)],
    # round 75 (fixtures/real/record_blind75.sh, blind75_train.py): two more, chosen blind and recorded at the end of
    # the round, read before any change: a text classifier whose batches are tokenized in Python on the main thread
    # and uploaded with blocking copies, and GPT-2 generation whose top-p sampling runs in NumPy on each token's logits
    *[(f"blind75_{p}_base{i}", f"blind75_{p}_fix{i}", DATA_CHANGE if check == "host-data" else None,
       f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("tokenize", "the corpus tokenized once into GPU tensors, not each batch in Python and uploaded blocking",
           "host-data"),
          ("cpusample", "top-p sampling on the GPU (torch.multinomial), not each token's logits copied to NumPy",
           "host-data"))
      for i in (1, 2)],
    # round 76 (fixtures/real/record_blind76.sh, blind76_train.py): two more, chosen for the round and recorded before
    # any check looked at them: a CNN whose DataLoader (6 workers) starts its workers again for each 20-step epoch,
    # and a ViT scoring 64 images a step one at a time (64 batch-1 forwards) where one batched forward does it
    *[(f"blind76_{p}_base{i}", f"blind76_{p}_fix{i}", None, f"{what}; {'first' if i == 1 else 'second'} pair", check)
      for p, what, check in (
          ("epochs", "DataLoader(persistent_workers=True), not its 6 workers started again for each epoch",
           "host-wait"),
          ("perimage", "one batched forward of the 64 images, not 64 forwards of one image each", "launch-overhead"))
      for i in (1, 2)],
    # round 77 (fixtures/real/record_blind77.sh, blind77_train.py): two more, chosen for the round and recorded before
    # any check looked at them: a GPT that copies its weights to the host after every step (a rollback snapshot), and
    # a search loop whose host spins on `event.query()` after each step's launches
    *[(f"blind77_{p}_base{i}", f"blind77_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair",
       check)
      for p, change, what, check in (
          ("hostsnap", DATA_CHANGE, "the weights' snapshot copied into buffers on the GPU, not to the host each step",
           "host-data"),
          ("pollwait", {"remove": ("sync",)}, "no `while not event.query(): time.sleep(0)` after each step",
           "host-sync"))
      for i in (1, 2)],
    # round 78 (fixtures/real/record_blind78.sh, blind78_train.py): a training loop beside a Python thread that
    # tokenizes its batches (the interpreter lock shared), and a streaming recognizer that captures its CUDA graph anew
    # every step
    *[(f"blind78_{p}_base{i}", f"blind78_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair",
       check)
      for p, change, what, check in (
          ("gilthread", {"remove": ("lock-wait",)}, "the batches tokenized in DataLoader worker processes, not a "
           "Python thread beside the loop", "host-wait"),
          ("recapture", {"uncapture": True}, "the CUDA graph captured once, each step's input copied into its static "
           "buffer, not captured anew each step", "graph-recapture"))
      for i in (1, 2)],
    # round 78, second set (fixtures/real/record_blind79.sh, blind79_train.py): a service that moves its idle model to
    # the CPU and the next one back for each request, and a training loop that saves a checkpoint and its metrics with
    # fsync after every step
    *[(f"blind79_{p}_base{i}", f"blind79_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair",
       check)
      for p, change, what, check in (
          ("offload", DATA_CHANGE, "both models resident on the GPU, not moved to the CPU and back per request",
           "host-data"),
          ("fsynclog", {**DATA_CHANGE, "remove": ("file-io",)}, "the checkpoint and metrics written every 100 "
           "steps, not saved and fsync'd every step", "host-data"))
      for i in (1, 2)],
    # round 79 (fixtures/real/record_blind80.sh, blind80_train.py): a training loop that runs nvidia-smi through
    # subprocess.run after every step, and one that calls gc.collect() after every step over a data set index of 2.3
    # million Python objects (the base runs stopped at 80 and 82 steps by their time cap)
    *[(f"blind80_{p}_base{i}", f"blind80_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair",
       check)
      for p, change, what, check in (
          ("gpumon", {"remove": ("io-wait",)}, "GPU figures queried from a thread every 2 s, not nvidia-smi run after "
           "every step", "host-wait"),
          ("gccollect", None, "no gc.collect() after each step", "host-compute"))
      for i in (1, 2)],
    # round 82 (fixtures/real/record_blind82.sh, blind82_train.py): debugging and profiling settings left on in a
    # training script; launchblock's second pair was not kept (the suite's time), nocache and emitnvtx recorded in
    # round 83 (emitnvtx's change is the annotation's removal at its measured cost a range: the finding's own)
    ("blind82_launchblock_base1", "blind82_launchblock_fix1", None, "CUDA_LAUNCH_BLOCKING=1 unset; first pair",
     "launch-overhead"),
    *[(f"blind82_{p}_base{i}", f"blind82_{p}_fix{i}", change, f"{what}; {'first' if i == 1 else 'second'} pair",
       check)
      for p, change, what, check in (
          ("nocache", {"remove": ("allocator",)}, "PYTORCH_NO_CUDA_MEMORY_CACHING=1 unset", "allocator-churn"),
          ("emitnvtx", {"unannotate": True}, "no `emit_nvtx(record_shapes=True)` around the loop",
           "launch-overhead"))
      for i in (1, 2)],
    # round 88 (fixtures/real/record_blind88.sh, blind88_train.py): float32 training whose matrix products take TF32
    # (a GPT with precision "high", a CNN's cuDNN convolutions by default) against bfloat16 autocast, recorded after
    # tf32-matmul was written, before its rate was measured on them (bf16_rates.csv's H100 row is theirs)
    *[(f"blind88_{p}_base{i}", f"blind88_{p}_fix{i}", None,
       f"torch.autocast(bfloat16) on the forward and the loss; {'first' if i == 1 else 'second'} pair", "tf32-matmul")
      for p in ("gpt", "cnn") for i in (1, 2)],
]


def profile_path(name: str) -> Path:
    """A pair member's file in fixtures/real: a Kineto trace for a `_kineto` name, else an nsys export."""
    return REAL / (f"{name}.json.gz" if name.endswith("_kineto") else f"{name}_nsys.sqlite.xz")


def change_text(change: dict | None) -> str:
    if not change:
        return "-"
    if change.get("graph"):
        return "`--graph`"
    if change.get("pinned"):
        return "`--pinned`"
    if change.get("fuse"):
        return " ".join(f"`--fuse {r}`" for r in change["fuse"])
    if change.get("outliers"):
        return "`--outliers`"
    if change.get("untune"):
        return "`--untune`"
    if change.get("untime"):
        return "`--untime`"
    if change.get("unbuild"):
        return "`--unbuild`"
    if change.get("data_on_gpu"):
        return " ".join(["`--data-on-gpu`", *(f"`--remove {c}`" for c in change.get("remove", ()))])
    if change.get("uncapture"):
        return "`--uncapture`"
    if change.get("unannotate"):
        return "`--unannotate`"
    removed = " ".join(f"`--remove {c}`" for c in change.get("remove", ()))
    return f"{removed} `--uncheck`" if change.get("uncheck") else removed


def noise_ns(steps: dict, after: dict) -> float | None:
    """Two standard errors of the difference of the twins' mean step periods (each period's standard deviation over
    the root of the steps): how far the measured saving itself may lie from the fix's true one, steps taken as
    independent. kin54's traces hold 8 steps each, whose periods spread by 2-7 ms."""
    other = after["timeline"]["steps"]
    if not steps.get("count") or not other.get("count") or steps.get("stddev_ns") is None \
            or other.get("stddev_ns") is None:
        return None
    return 2.0 * (steps["stddev_ns"] ** 2 / steps["count"] + other["stddev_ns"] ** 2 / other["count"]) ** 0.5


def calibration_rows() -> list[dict]:
    from nsanalyze.analyze import analyze
    from nsanalyze.analyze import Options
    from nsanalyze.whatif import WhatIf, whatif

    rows = []
    for base, fixed, change, fix, answers in PAIRS:
        base_path, fixed_path = profile_path(base), profile_path(fixed)
        if not base_path.exists() or not fixed_path.exists():
            continue
        before, after = analyze([str(base_path)]), analyze([str(fixed_path)])
        steps = before["timeline"]["steps"]
        actual = steps["mean_ns"] - after["timeline"]["steps"]["mean_ns"]
        first = next((f for f in before["findings"] if f["kernel_id"] is None and f["severity"] != "info"), None)
        own = next((f for f in before["findings"] if f["check"] == answers), None)
        same = same_work(base_path, fixed_path)
        # the twins run the same kernels a step and the fixed run's GPU never rests (its steps GPU-bound): a
        # change in the kernels' own time a step is the GPU's clock, not the fix; at the base's kernel speed
        # the fixed run's steps would be that much shorter
        busy = after["timeline"]["steps"].get("gpu_busy_time_share") or 0.0
        same_speed = actual + (same[1] - same[0]) if same and busy >= GPU_BOUND_SHARE else None
        row = {"pair": f"{base} -> {fixed}", "fix": fix, "actual_ns": actual, "noise_ns": noise_ns(steps, after),
               "same_work": same,
               "same_speed_ns": same_speed,
               "finding": first["check"] if first else None,
               "finding_ns": first["estimated_savings_ns"] / steps["count"] if first else None,
               "answers": answers, "answers_ns": own["estimated_savings_ns"] / steps["count"] if own else None,
               "priced_by": _priced_by(own),
               "change": change_text(change), "whatif_ns": None, "self_check": None}
        if change:
            result = whatif([str(base_path)], Options(), WhatIf(remove=tuple(change.get("remove", ())),
                                                               graph=bool(change.get("graph")),
                                                               outliers=bool(change.get("outliers")),
                                                               pinned=bool(change.get("pinned")),
                                                               fuse=tuple(change.get("fuse", ())),
                                                               untune=bool(change.get("untune")),
                                                               untime=bool(change.get("untime")),
                                                               unbuild=bool(change.get("unbuild")),
                                                               uncheck=bool(change.get("uncheck")),
                                                               data_on_gpu=bool(change.get("data_on_gpu")),
                                                               uncapture=bool(change.get("uncapture")),
                                                               unannotate=bool(change.get("unannotate"))))[0]
            row["whatif_ns"] = result["base_mean_step_ns"] - result["predicted_mean_step_ns"]
            row["self_check"] = result["self_check"]["error"]
        rows.append(row)
    return rows


OTHER_SPEED = 0.05       # the same kernels this much slower or faster a step: noted under the table
GPU_BOUND_SHARE = 0.95   # the fixed run's GPU busy this share of its steps' time: its steps are its kernels' time

STEP_KERNELS_SQL = """
WITH steps AS (SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
               WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE '{like}' ORDER BY n.start)
SELECT k.shortName, COUNT(*), SUM(k.end - k.start) FROM steps
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= steps.start AND r.start < steps.end
JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
WHERE steps.start >= (SELECT start FROM steps LIMIT 1 OFFSET {skip}) GROUP BY k.shortName
"""


def step_kernels(path: Path) -> tuple[dict, float, int] | None:
    """The kernels the steps past the first third launch, by SQL on the export: {name: launches a step},
    kernel time a step, steps."""
    import sqlite3

    from nsanalyze.read.files import open_local

    _, local = open_local(path)
    with sqlite3.connect(f"file:{local}?mode=ro", uri=True) as db:
        steps = db.execute("""SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                              WHERE n.eventType = 59 AND COALESCE(n.text, s.value) LIKE 'step %'""").fetchone()[0]
        if steps < 3:
            return None
        skip = steps // 3
        rows = db.execute(STEP_KERNELS_SQL.format(like="step %", skip=skip)).fetchall()
        names = dict(db.execute("SELECT id, value FROM StringIds").fetchall())
    kept = steps - skip
    launches: dict = {}
    for name_id, count, _ in rows:
        launches[names.get(name_id)] = launches.get(names.get(name_id), 0) + count / kept
    return launches, sum(ns for _, _, ns in rows) / kept, kept


def same_work(base: Path, fixed: Path) -> tuple[float, float] | None:
    """The twins' kernel time a step (base, fixed) where their steps launch the same kernels, as many of
    each (within half a launch a step): the same work, so a difference in its time is the GPU's speed."""
    if not (base.name.endswith(".sqlite.xz") and fixed.name.endswith(".sqlite.xz")):
        return None   # the kernels a step by SQL: exports only
    a, b = step_kernels(base), step_kernels(fixed)
    if a is None or b is None or set(a[0]) != set(b[0]):
        return None
    if any(abs(a[0][n] - b[0][n]) > 0.5 for n in a[0]):
        return None
    return a[1], b[1]


def _priced_by(finding: dict | None) -> str:
    """How the report priced the finding: by the replay of its change (evidence.replayed_savings_ns) or by the
    check's own estimate."""
    if finding is None:
        return "-"
    return "replay" if "replayed_savings_ns" in finding["evidence"] else "check"


def whatif_time() -> list[tuple[str, tuple[float, float]]]:
    """`nsanalyze whatif --speedup` on the bench exports (bench/run.py's 1,500-step training loop and its x20
    replica, the largest): wall seconds and peak MB. `report` on the same exports is in bench/run.py's table."""
    from run import SCALE, measure, scaled, unpack   # bench/run.py

    small = unpack("train_nsys.sqlite.xz")
    out = Path(tempfile.mkdtemp()) / "out.json"
    binary = str(Path(sys.executable).parent / "nsanalyze")
    rows = []
    for path in (small, scaled(small, SCALE)):
        rows.append((f"{path.name}, {path.stat().st_size / 1e6:,.0f} MB",
                     measure([binary, "whatif", str(path), "--speedup", "regex:gemm=2", "-o", str(out)])))
    return rows


def share(predicted: float | None, actual: float) -> str:
    if predicted is None or not actual:
        return "-"
    return f"{(predicted - actual) / actual:+.0%}"


WITHIN = 0.25   # issue 34's aim: a prediction within 25% of what the fix saved


def tally(rows: list[dict]) -> str:
    """How many predictions land within WITHIN of what the fix saved: the first finding's over every pair, and
    apart, the pairs whose recorded fix is the first finding's own change (its check answers the fix) and those
    whose fix answers another finding (the base held two causes; the first finding's change was not recorded)."""
    def within(predicted, actual):
        return predicted is not None and actual and abs(predicted - actual) <= WITHIN * abs(actual)

    own = [r for r in rows if r["finding"] and r["finding"] == r["answers"]]
    other = [r for r in rows if r not in own]
    answered = [r for r in rows if r["answers"] and r["answers_ns"] is not None]
    count = lambda group, key: sum(within(r[key], r["actual_ns"]) for r in group)  # noqa: E731

    def in_noise(key):   # a miss by less than the measured saving's own noise (noise_ns)
        return sum(1 for r in answered if not within(r[key], r["actual_ns"]) and r.get("noise_ns") is not None
                   and abs(r[key] - r["actual_ns"]) <= r["noise_ns"])
    return (f"Within {WITHIN:.0%} of what the fix saved: the first finding on {count(rows, 'finding_ns')} of "
            f"{len(rows)} pairs; on {count(own, 'finding_ns')} of the {len(own)} whose fix is the first finding's "
            f"own change, and {count(other, 'finding_ns')} of the {len(other)} whose fix answers another finding or "
            f"none; the fix's own finding on {count(answered, 'answers_ns')} of the {len(answered)} where it speaks, "
            f"and of its misses, {in_noise('answers_ns')} by less than the measured saving's own noise (two standard "
            "errors of the twins' mean step periods: the `actual` column's ±).")


def render(rows: list[dict], timing) -> str:
    ms = lambda ns: "-" if ns is None else f"{ns / 1e6:.2f} ms"  # noqa: E731
    lines = ["Predicted against actual savings a step on the real fix pairs (fixtures/real); actual: the difference "
             "of the twins' mean GPU step periods (steps.mean_ns), ± two standard errors of that difference (the "
             "periods' spread over the root of the steps).", "",
             "| pair (fix) | actual | first finding | its savings a step | error | the fix's finding | its savings "
             "(priced by) | error | whatif change | replayed savings | error | self-check |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        check = "-" if r["self_check"] is None else f"{r['self_check']:.2%} off"
        noise = f" ±{r['noise_ns'] / 1e6:.2f}" if r.get("noise_ns") is not None else ""
        lines.append(f"| {r['pair']} ({r['fix']}) | {ms(r['actual_ns'])}{noise} | {r['finding'] or '-'} "
                     f"| {ms(r['finding_ns'])} | {share(r['finding_ns'], r['actual_ns'])} | {r['answers'] or 'none'} "
                     f"| {ms(r['answers_ns'])} ({r['priced_by']}) | {share(r['answers_ns'], r['actual_ns'])} "
                     f"| {r['change']} | {ms(r['whatif_ns'])} "
                     f"| {share(r['whatif_ns'], r['actual_ns'])} | {check} |")
        if r.get("same_speed_ns") is not None and r["same_work"][0] and \
                abs(r["same_work"][1] - r["same_work"][0]) >= OTHER_SPEED * r["same_work"][0]:
            base_k, fixed_k = r["same_work"]
            notes.append(f"- {r['pair']}: both runs launch the same kernels a step; in the fixed run, whose GPU never "
                         f"rests, they take {ms(fixed_k)} a step against {ms(base_k)} ({(fixed_k - base_k) / base_k:+.0%}: "
                         f"the GPU's clock under sustained load; the exports hold no clock metrics). At the base's "
                         f"kernel speed the fix saved {ms(r['same_speed_ns'])}: the first finding "
                         f"{share(r['finding_ns'], r['same_speed_ns'])}, the fix's {share(r['answers_ns'], r['same_speed_ns'])}"
                         + (f", whatif {share(r['whatif_ns'], r['same_speed_ns'])}" if r["whatif_ns"] is not None else "")
                         + ". The predictions keep the kernels' measured durations.")
    lines += ["", tally(rows)]
    if notes:
        lines += ["", "Same work, other speed (the twins' kernels a step by SQL; the errors above are against what "
                  "the fix saved as measured):", ""] + notes
    if timing:
        lines += ["", "| input | nsanalyze whatif --speedup regex:gemm=2 -o out.json (report: the table above) |",
                  "|---|---|"]
        lines += [f"| {label} | {wall:.2f} s, {peak:,.0f} MB |" for label, (wall, peak) in timing]
    return "\n".join(lines) + "\n"


def write_table(path: Path, table: str) -> None:
    begin, end = "<!-- calibration:begin -->", "<!-- calibration:end -->"
    text = path.read_text()
    if begin not in text:
        text = text.replace("## Notes", f"## Calibration: predicted against actual\n\n{begin}\n{end}\n\n## Notes", 1)
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    path.write_text(f"{head}{begin}\n{table}{end}{tail}")


if __name__ == "__main__":
    started = time.perf_counter()
    rows = calibration_rows()
    timing = None if os.environ.get("NSANALYZE_BENCH_NO_TIMING") else whatif_time()
    table = render(rows, timing)
    print(table)
    write_table(ROOT / "docs" / "performance.md", table)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
