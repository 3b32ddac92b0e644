"""Training CLI for the Transformer (or the RNN with attention, --architecture rnn) on Multi30k.

    python -m model.training.train --src en --tgt de --out checkpoints/en-de

Token-bucketed batches, label smoothing, Adam with the paper's warm-up then inverse-square-root
schedule, gradient clipping, dropout, validation (loss and greedy BLEU) after every epoch,
best/last checkpoints, averaging of the last epochs, resume after interruption (--resume),
seeded and deterministic for a given machine. Uses every CPU core, or CUDA when present.
Work files (last state for resume, per-epoch weights) go to --work; the shipped folder to --out.

Started by torchrun, it trains with DistributedDataParallel over every process torchrun starts (gloo on CPU,
nccl on GPUs; model/training/distributed.py), each taking its share of every batch; rank 0 alone validates and writes:

    torchrun --nproc_per_node 2 -m model.training.train --src en --tgt de --out checkpoints/en-de

Needs the `studies` extra (pip install "attention-inspector[studies]"): datasets reads the data, sacrebleu scores
validation BLEU.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import platform
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from attention_inspector.model.extras import BLEU, DATA, require
from attention_inspector.model.nets.rnn import ATTENTIONS, RNNConfig
from attention_inspector.model.nets.transformer import ModelConfig
from attention_inspector.model.serving.checkpoint import (build_model, load_checkpoint, load_weights, read_json,
                                                          save_checkpoint, save_weights, write_json)
from attention_inspector.model.serving.translator import Translator
from attention_inspector.model.text.batching import make_batch, token_batches
from attention_inspector.model.text.vocab import BPE, CHARS, EOS_ID, PAD_ID, Tokenizer, Truecaser, Vocab
from attention_inspector.model.training import distributed
from attention_inspector.model.training.data import Column, load_pairs, rows, take
from attention_inspector.model.training.evaluate import DEFAULT_DATA, score


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="folder of raw Multi30k files, or a hub id (bentrevett/multi30k)")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--out", required=True, help="checkpoint folder to ship, e.g. checkpoints/en-de")
    p.add_argument("--work", help="folder for resumable state and per-epoch weights (default: runs/<out name>)")
    p.add_argument("--resume", action="store_true", help="continue from <work>/last")
    p.add_argument("--init", metavar="CHECKPOINT",
                   help="continue a shipped checkpoint whose work folder is gone: its weights, epochs, steps and "
                        "minutes (the schedule and --max-minutes go on from them), with Adam's moments anew; "
                        "the rest of the command must build the same model and vocabularies")
    p.add_argument("--min-freq", type=int, default=2)
    p.add_argument("--bpe", type=int, default=0, metavar="MERGES",
                   help="split words into byte-pair pieces: this many merges, learned jointly on both sides' "
                        "training words (0: whole words)")
    p.add_argument("--cased", action="store_true", help="keep case (default: lower-case, restored by a truecaser)")
    p.add_argument("--architecture", default="transformer", choices=["transformer", "rnn"])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--encoder-layers", type=int, default=3)
    p.add_argument("--decoder-layers", type=int, default=3)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--dropout", type=float, default=0.1,
                   help="on embeddings and sub-layer outputs (and, unless set below, attention weights and the "
                        "feed-forward activations too)")
    p.add_argument("--attention-dropout", type=float, help="on attention weights (default: --dropout)")
    p.add_argument("--activation-dropout", type=float,
                   help="inside the feed-forward network (default: --dropout; fairseq's recipes use 0 for both)")
    p.add_argument("--positional", default="sinusoidal", choices=["sinusoidal", "learned"])
    p.add_argument("--norm", default="post", choices=["post", "pre"])
    p.add_argument("--no-tie", action="store_true", help="do not share target embedding and output projection")
    p.add_argument("--hidden-size", type=int, default=512, help="RNN: decoder state size (encoder: half per direction)")
    p.add_argument("--embedding-dim", type=int, default=256, help="RNN: word embedding size")
    p.add_argument("--attention", default="general", choices=list(ATTENTIONS),
                   help="RNN: dot (no weights), split (heads cut from the states, no weights) or general (learned "
                        "projections per head)")
    p.add_argument("--teacher-forcing", type=float, default=1.0,
                   help="RNN: probability of feeding the gold previous token while training (else the model's guess)")
    p.add_argument("--max-len", type=int, default=128, help="longest sequence the model can take (positions)")
    p.add_argument("--max-tokens", type=int, default=4000, help="padded tokens per batch and side")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--max-minutes", type=float, default=None, help="start no epoch that would end past this")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=1000, help="linear warm-up steps, then --decay")
    p.add_argument("--decay", default="inverse-sqrt", choices=["inverse-sqrt", "constant", "linear"],
                   help="after warm-up: peak * sqrt(warmup / step), the peak, or a straight line down to "
                        "a tenth of the peak at the last planned step (--epochs)")
    p.add_argument("--constant-lr", dest="decay", action="store_const", const="constant",
                   help="the same as --decay constant")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    p.add_argument("--average", type=int, default=5, help="average the weights of the last N epochs")
    p.add_argument("--beam", type=int, default=5, help="beam size recorded as the shipped decoding setting")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    return p.parse_args(argv)


def learning_rate(step: int, peak: float, warmup: int, decay: str, total_steps: int) -> float:
    """Linear warm-up to `peak`, then inverse-sqrt, constant, or linear decay to peak / 10 at `total_steps`."""
    if step < warmup:
        return peak * step / warmup
    if decay == "constant":
        return peak
    if decay == "linear":
        return peak * (1 - 0.9 * min(1.0, (step - warmup) / max(total_steps - warmup, 1)))
    return peak * math.sqrt(warmup / step)


def seed_everything(seed: int) -> None:
    """Seed Python (teacher forcing) and torch (init, dropout); ask torch for deterministic kernels."""
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def model_config(args, src_vocab_size: int, tgt_vocab_size: int) -> ModelConfig | RNNConfig:
    """The config of the architecture chosen on the command line."""
    if args.architecture == "rnn":
        return RNNConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                         embedding_dim=args.embedding_dim, hidden_size=args.hidden_size, n_heads=args.heads,
                         dropout=args.dropout, max_len=args.max_len, pad_id=PAD_ID, attention=args.attention)
    return ModelConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=args.d_model,
                       n_heads=args.heads, n_encoder_layers=args.encoder_layers,
                       n_decoder_layers=args.decoder_layers, d_ff=args.d_ff, dropout=args.dropout,
                       attention_dropout=args.attention_dropout, activation_dropout=args.activation_dropout,
                       max_len=args.max_len, positional=args.positional, norm=args.norm,
                       tie_embeddings=not args.no_tie, pad_id=PAD_ID)


def prepare_data(args) -> tuple[dict, Translator]:
    """Tokenize train/val, build vocabularies and the truecaser; returns the id pairs and an untrained Translator.

    Tokens and ids are computed a block of sentences at a time into tables that `datasets` keeps on disk (for a
    local corpus) and memory-maps; vocabularies and the truecaser are counted in one pass over them. Train's ids
    are read back a row at a time as batches need them (`Column`), so a corpus of millions of pairs is never in
    memory whole; val's tokens and references (a few thousand sentences) are kept as lists for validation."""
    lowercase = not args.cased
    src_tokenizer, tgt_tokenizer = Tokenizer(args.src, lowercase), Tokenizer(args.tgt, lowercase)
    cased_target = Tokenizer(args.tgt, lowercase=False)

    def tokenize(batch: dict) -> dict:
        tgt_cased = cased_target.words_all(batch["tgt"])
        return {"src_tokens": src_tokenizer.words_all(batch["src"]), "tgt_cased": tgt_cased,
                "tgt_tokens": [[t.lower() for t in s] for s in tgt_cased] if lowercase else tgt_cased}

    recipe = f"{args.src}-{args.tgt}-{'lower' if lowercase else 'cased'}"  # what the cached tables depend on
    splits = {split: _mapped(load_pairs(args.data, split, args.src, args.tgt), tokenize, f"tokens-{recipe}")
              for split in ("train", "val")}
    train = splits["train"]
    if args.bpe:
        # Joint merges (as Sennrich et al. and Wu et al.): a name spelled alike on both sides splits alike.
        word_counts = Counter(word for side in ("src_tokens", "tgt_tokens") for words in rows(train, side)
                              for word in words)
        bpe = BPE.learn(word_counts, args.bpe)
        src_tokenizer, tgt_tokenizer = Tokenizer(args.src, lowercase, bpe), Tokenizer(args.tgt, lowercase, bpe)
    src_vocab = Vocab.build((src_tokenizer.pieces(s) for s in rows(train, "src_tokens")), args.min_freq)
    tgt_vocab = Vocab.build((tgt_tokenizer.pieces(t) for t in rows(train, "tgt_tokens")), args.min_freq)
    if args.tgt == CHARS:  # characters keep their case as written: nothing to restore
        truecaser = Truecaser({}, capitalize_first=False)
    else:
        truecaser = Truecaser.build(rows(train, "tgt_cased")) if lowercase else Truecaser({})
    translator = Translator(build_model(model_config(args, len(src_vocab), len(tgt_vocab))),
                            src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab, truecaser)
    limit = args.max_len - 1

    def encode(batch: dict) -> dict:
        src = [src_vocab.encode(src_tokenizer.pieces(s)) + [EOS_ID] for s in batch["src_tokens"]]
        tgt = [tgt_vocab.encode(tgt_tokenizer.pieces(t)) for t in batch["tgt_tokens"]]
        src_lengths, tgt_lengths = [len(s) for s in src], [len(t) + 1 for t in tgt]  # <eos> counted on both sides
        return {"src": src, "tgt": tgt, "src_length": src_lengths, "tgt_length": tgt_lengths,
                "keep": [s <= limit and t <= limit for s, t in zip(src_lengths, tgt_lengths)]}

    # The step names a cached table by what it holds: a new layout of `encode` needs a new name ("ids2": lengths).
    vocabularies = f"{recipe}-{args.min_freq}-{len(src_vocab)}-{len(tgt_vocab)}-{limit}" + \
        (f"-bpe{args.bpe}" if args.bpe else "")
    data = {}
    for split, tokens in splits.items():
        ids = _mapped(tokens, encode, f"ids2-{vocabularies}", remove_columns=tokens.column_names)
        ids = ids.filter(lambda keep: keep, input_columns="keep", batched=True, batch_size=10_000,
                         new_fingerprint=fingerprint(ids, "kept"))
        data[split] = {"src": Column(ids, "src"), "tgt": Column(ids, "tgt"),
                       "src_lengths": ids["src_length"][:], "tgt_lengths": ids["tgt_length"][:]}  # lists
    val = splits["val"]
    data["val"].update(src_tokens=[src_tokenizer.pieces(s) for s in val["src_tokens"]], references=val["tgt"])
    return data, translator


def _mapped(dataset, function, step: str, **options):
    """`dataset.map(function)` over blocks of rows, its result a table in the dataset's cache (memory-mapped) when
    the dataset has one; named by `step` so that a run with the same data and settings reuses it."""
    return dataset.map(function, batched=True, batch_size=1000, new_fingerprint=fingerprint(dataset, step),
                       desc=step.split("-")[0], **options)


def fingerprint(dataset, step: str) -> str:
    """The name `datasets` caches the result of `step` on `dataset` under (at most 64 characters)."""
    return hashlib.sha256(f"{dataset._fingerprint}-{step}".encode()).hexdigest()[:32]


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Adam's moment estimates as flat named tensors, so resume state is safetensors, not pickle."""
    flat = {}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            flat[f"{index}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return flat


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, flat: dict[str, torch.Tensor]) -> None:
    """The inverse of `optimizer_tensors`."""
    state: dict[int, dict] = {}
    for name, value in flat.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})


def save_state(folder: Path, model, optimizer, trainer_state: dict) -> None:
    """Everything needed to resume: weights, optimizer moments, RNG, counters (written atomically)."""
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_weights(model, tmp / "model.safetensors")
    save_file({**optimizer_tensors(optimizer), "rng.torch_rng": torch.get_rng_state()},
              str(tmp / "optimizer.safetensors"))
    write_json(tmp / "trainer_state.json", {**trainer_state, "python_rng": random.getstate()})
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def load_state(folder: Path, model, optimizer) -> dict:
    """Restore what `save_state` wrote; returns the trainer's counters and history."""
    load_weights(model, folder / "model.safetensors")
    flat = load_file(str(folder / "optimizer.safetensors"))
    torch.set_rng_state(flat.pop("rng.torch_rng"))
    load_optimizer_tensors(optimizer, flat)
    state = read_json(folder / "trainer_state.json")
    version, internal, gauss = state.pop("python_rng")
    random.setstate((version, tuple(internal), gauss))
    return state


def start_from(folder: Path, translator: Translator) -> dict:
    """Load a shipped checkpoint's weights into `translator`'s model; returns its trainer counters and history,
    its weights' validation BLEU as the best so far."""
    shipped = load_checkpoint(folder)
    if (shipped.model.config != translator.model.config or shipped.src_vocab.itos != translator.src_vocab.itos
            or shipped.tgt_vocab.itos != translator.tgt_vocab.itos):
        raise SystemExit(f"--init {folder}: this command builds another model or other vocabularies than the "
                         f"checkpoint's (repeat the flags of its metrics.json 'command')")
    training = shipped.metrics.get("training")
    if not training:
        raise SystemExit(f"--init {folder}: its metrics.json records no training to continue")
    translator.model.load_state_dict(shipped.model.state_dict())
    return {"epoch": training["epochs"], "step": training["steps"], "seconds": float(training["wall_seconds"]),
            "best_bleu": shipped.metrics["validation_greedy"]["bleu_tok_lc"], "history": training["history"]}


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of several safetensors weight files (checkpoint averaging)."""
    total = None
    for path in paths:
        weights = load_file(str(path))
        total = weights if total is None else {k: total[k] + weights[k] for k in total}
    return {k: v / len(paths) for k, v in total.items()}


@torch.no_grad()
def validate(translator: Translator, val: dict, device) -> dict:
    """Teacher-forced validation loss and greedy BLEU on the validation split."""
    model = translator.model
    model.eval()
    total_loss, total_tokens = 0.0, 0
    for indices in token_batches(val["src_lengths"], val["tgt_lengths"], 6000):
        batch = make_batch(take(val["src"], indices), take(val["tgt"], indices))
        logits, _ = model(batch.src.to(device), batch.tgt_in.to(device), fused=True)
        total_loss += F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.to(device).flatten(),
                                      ignore_index=PAD_ID, reduction="sum").item()
        total_tokens += batch.n_target_tokens
    hypotheses = translator.translate_tokens(val["src_tokens"], beam_size=1)
    metrics = score(translator, hypotheses, val["references"])
    return {"loss": round(total_loss / total_tokens, 4), "bleu_tok_lc": metrics["bleu_tok_lc"],
            "bleu": metrics["bleu"]}


def pick_examples(sentences: list[str], count: int = 6) -> list[str]:
    """A few real sentences from short to long (evenly spaced by length), for the app's example list."""
    by_length = sorted(sentences, key=lambda s: (len(s.split()), s))
    return [by_length[round(i * (len(by_length) - 1) / max(count - 1, 1))] for i in range(count)]


def step_loss(model, data: dict, indices: list[int], ranks: distributed.Ranks, device, label_smoothing: float,
              **forcing) -> tuple[torch.Tensor, float, int]:
    """The loss to back-propagate for batch `indices` on this rank, its summed token loss and its target tokens.

    One process: the mean cross-entropy over the batch's target tokens. Several: each rank sums over its share and
    divides by the whole batch's tokens (which every rank can count) over the number of ranks, so that the average
    of the ranks' gradients that DistributedDataParallel takes is the gradient of the whole batch's mean. A rank
    whose share is empty (a batch of fewer sentences than ranks) still runs a sentence, weighted 0, as every rank
    must take part in each gradient exchange.
    """
    mine = ranks.share(indices)
    batch = make_batch(take(data["src"], mine or indices[:1]), take(data["tgt"], mine or indices[:1]))
    logits, _ = model(batch.src.to(device), batch.tgt_in.to(device), fused=True, **forcing)
    logits, targets = logits.flatten(0, 1), batch.tgt_out.to(device).flatten()
    if ranks.world_size == 1:
        loss = F.cross_entropy(logits, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing)
        return loss, loss.item() * batch.n_target_tokens, batch.n_target_tokens
    summed = F.cross_entropy(logits, targets, ignore_index=PAD_ID, label_smoothing=label_smoothing, reduction="sum")
    if not mine:
        summed = summed * 0.0
    whole = sum(data["tgt_lengths"][i] for i in indices)  # the batch's target tokens, <eos> included
    return summed * (ranks.world_size / whole), summed.item(), batch.n_target_tokens if mine else 0


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo (Linux): runs on other CPUs are not comparable."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return f"{platform.processor() or platform.machine()} CPU"


def hardware(device) -> str:
    """What trained the model, for metrics.json."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{cpu_model()}, {torch.get_num_threads()} threads"


def train(args) -> Translator:
    """Train as `args` say, epoch by epoch, then ship the better of best/averaged weights to --out."""
    ranks = distributed.start()
    # torchrun's processes on one machine share its cores.
    torch.set_num_threads(args.threads or max(1, os.cpu_count() // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    device = ranks.device
    seed_everything(args.seed)
    data, translator = prepare_data(args)
    model = translator.model.to(device)
    # One process: the model itself. Several: DDP, which starts every rank from rank 0's weights and averages the
    # ranks' gradients during backward.
    trained = model if ranks.backend is None else torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[ranks.local_rank] if ranks.backend == "nccl" else None)
    work = Path(args.work or Path("runs") / Path(args.out).name)
    (work / "epochs").mkdir(parents=True, exist_ok=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    state = {"epoch": 0, "step": 0, "seconds": 0.0, "best_bleu": -1.0, "history": []}
    if args.resume and (work / "last").is_dir():
        state = load_state(work / "last", model, optimizer)
        log(ranks, f"resumed from {work / 'last'} after epoch {state['epoch']}, step {state['step']}")
    elif args.init:
        state = start_from(Path(args.init), translator)
        if ranks.main:  # the best so far: a continuation that never beats it ships it unchanged
            save_weights(model, work / "best.safetensors")
        log(ranks, f"continuing {args.init} after epoch {state['epoch']}, step {state['step']}, "
                   f"{state['seconds'] / 60:.1f} min of training")
    n_params = sum(p.numel() for p in model.parameters())
    log(ranks, f"{n_params / 1e6:.2f}M parameters; vocab {len(translator.src_vocab)} {args.src} / "
               f"{len(translator.tgt_vocab)} {args.tgt}; {len(data['train']['src'])} training pairs; {hardware(device)}"
               + (f"; {ranks.world_size} processes ({ranks.backend})" if ranks.backend else ""))
    train_data = data["train"]
    forcing = {"teacher_forcing": args.teacher_forcing} if args.architecture == "rnn" else {}
    src_lengths, tgt_lengths = train_data["src_lengths"], train_data["tgt_lengths"]
    total_steps = args.epochs * len(token_batches(src_lengths, tgt_lengths, args.max_tokens, seed=args.seed))
    while state["epoch"] < args.epochs:
        epoch = state["epoch"] + 1
        epoch_seconds = state["history"][-1]["seconds"] if state["history"] else 0.0
        # Rank 0's clock decides, for every rank: they must stop together.
        if ranks.agree(bool(args.max_minutes) and state["seconds"] + epoch_seconds > (args.max_minutes or 0) * 60):
            log(ranks, f"stopping before epoch {epoch}: the time budget of {args.max_minutes} min would be exceeded")
            break
        model.train()
        start = time.perf_counter()
        batches = token_batches(src_lengths, tgt_lengths, args.max_tokens, seed=args.seed + epoch)
        progress = tqdm(batches, desc=f"epoch {epoch}", file=sys.stdout, mininterval=10, dynamic_ncols=True,
                        disable=not ranks.main)
        total_loss, total_tokens = 0.0, 0
        for indices in progress:
            state["step"] += 1
            lr = learning_rate(state["step"], args.lr, args.warmup, args.decay, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, summed, tokens = step_loss(trained, train_data, indices, ranks, device, args.label_smoothing,
                                             **forcing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            total_loss += summed
            total_tokens += tokens
            elapsed = time.perf_counter() - start
            progress.set_postfix(loss=f"{summed / max(tokens, 1):.3f}", tok_s=f"{total_tokens / elapsed:.0f}",
                                 lr=f"{lr:.2e}", refresh=False)
        seconds = time.perf_counter() - start
        total_loss, total_tokens = ranks.sum([total_loss, total_tokens])
        state["seconds"] += seconds
        state["epoch"] = epoch
        if not ranks.main:  # rank 0 validates and writes; the others go on to the next epoch's first exchange
            continue
        val = validate(translator, data["val"], device)
        record = {"epoch": epoch, "step": state["step"], "train_loss": round(total_loss / total_tokens, 4),
                  "seconds": round(seconds, 1), "target_tokens_per_s": round(total_tokens / seconds),
                  "val_loss": val["loss"], "val_bleu_tok_lc": val["bleu_tok_lc"], "val_bleu": val["bleu"]}
        state["history"].append(record)
        print(" ".join(f"{k}={v}" for k, v in record.items()), flush=True)
        epoch_file = work / "epochs" / f"epoch{epoch:03d}.safetensors"
        save_weights(model, epoch_file)
        for old in sorted((work / "epochs").glob("epoch*.safetensors"))[:-args.average]:
            old.unlink()
        if val["bleu_tok_lc"] > state["best_bleu"]:
            state["best_bleu"] = val["bleu_tok_lc"]
            shutil.copy(epoch_file, work / "best.safetensors")
        save_state(work / "last", model, optimizer, state)
    distributed.stop(ranks)
    if not ranks.main:
        return translator
    return finish(args, translator, data, state, work, device, ranks)


def launcher(ranks: distributed.Ranks) -> str:
    """How this run was started: python, or torchrun with its nodes and processes per node."""
    if ranks.backend is None:
        return "python"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", ranks.world_size))
    nodes = ranks.world_size // per_node
    return "torchrun" + (f" --nnodes {nodes}" if nodes > 1 else "") + f" --nproc_per_node {per_node}"


def log(ranks: distributed.Ranks, message: str) -> None:
    """Print on rank 0 only (every rank would say the same)."""
    if ranks.main:
        print(message, flush=True)


def finish(args, translator: Translator, data: dict, state: dict, work: Path, device,
           ranks: distributed.Ranks = distributed.Ranks()) -> Translator:
    """Pick the best of {best epoch, average of the last epochs} on validation BLEU and ship it to --out."""
    model = translator.model
    candidates = {"best_epoch": load_file(str(work / "best.safetensors"))}
    epoch_files = sorted((work / "epochs").glob("epoch*.safetensors"))[-args.average:]
    if len(epoch_files) > 1:
        candidates[f"average_last_{len(epoch_files)}"] = average_weights(epoch_files)
    results = {}
    for name, weights in candidates.items():
        model.load_state_dict(weights, strict=False)
        results[name] = validate(translator, data["val"], device)
        print(f"{name}: {results[name]}")
    chosen = max(results, key=lambda name: results[name]["bleu_tok_lc"])
    model.load_state_dict(candidates[chosen], strict=False)
    model.to("cpu").eval()
    translator.metrics = {
        "model": f"{'RNN with attention' if args.architecture == 'rnn' else 'Transformer'} {args.src}->{args.tgt}",
        "weights": chosen,
        "decoding": {"beam_size": args.beam, "length_penalty": 1.0},
        "validation_greedy": results[chosen],
        "examples": pick_examples(load_pairs(args.data, "test", args.src, args.tgt)["src"][:200]),
        "training": {
            "data": f"{args.data} train ({len(data['train']['src'])} pairs)",
            # The source lengths it learned from, <eos> left out: outside them the app warns.
            "source_tokens": [min(data["train"]["src_lengths"]) - 1, max(data["train"]["src_lengths"]) - 1],
            "command": launcher(ranks) + " -m model.training.train " + " ".join(sys.argv[1:]),
            "epochs": state["epoch"], "steps": state["step"], "wall_seconds": round(state["seconds"]),
            "hardware": hardware(device), "torch": torch.__version__,
            "world_size": ranks.world_size, "backend": ranks.backend,
            "parameters": sum(p.numel() for p in model.parameters()), "history": state["history"],
            "args": vars(args),
        },
    }
    save_checkpoint(translator, args.out)
    print(f"saved {args.out} ({chosen})")
    return replace(translator)  # a new translator lays out the trained weights for its traces


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    require(*DATA, *BLEU)  # the `studies` extra, asked before any work
    train(args)


if __name__ == "__main__":
    main()
