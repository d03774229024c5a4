#!/usr/bin/env python3
"""Reliability of the megatrain command on the CUDA backend, for the GPU machine (issues 4 and 7).

Each case drives the CLI on the tiny preset and checks what the CPU tests (tests/test_kill.c,
test_device_fault.c, test_nan_skip.c, test_alloc_fault.c) check on the cpu backend:
  kill      SIGKILL at 15 seeded random moments (some inside checkpoint writes), --resume each
            time: every checkpoint left verifies, the run ends at its last step, and its master
            weights match an uninterrupted run within the stated tolerance (the CUDA backend is
            not bitwise deterministic: two uninterrupted runs are compared too, the noise floor)
  sigterm   SIGTERM mid-run: exit 143 (128 + the signal), a checkpoint of the step it stopped at,
            --resume completes
  oom       (GPU only) torch holds all but 1.5 GiB of the GPU: a 1B model is refused up front with
            the device memory numbers, and a tiny run with a batch that cannot fit is refused
            with nothing written, the last checkpoint of the tiny run beside it untouched
  alloc     MT_TEST_ALLOC_FAIL=pinned:1, pinned:3, device:1, device:5 on a --resume: clear
            message, exit 1, nothing written; a plain --resume then completes
  fault     MT_TEST_DEVICE_FAULT_STEP: exit 1, the last checkpoint good, resuming gives the
            uninterrupted run's weights
  nan       MT_TEST_NAN_STEP: the step is skipped, counted in metrics.jsonl, and changes nothing
  token     a token id past the vocabulary in the data: a clear error, no crash
  sample    (issue 28) sampling a run trained on this backend: the working weights alone are
            counted and loaded (the memory refusal names no master, moments or gradients), greedy
            output twice the same, Ctrl-C mid-generation: exit 130
  export    (issue 28) exporting a run trained on this backend: bf16 tensors whose squares sum as
            the checkpoint's masters rounded to bf16 do, and SIGTERM mid-export (paced by
            MT_TEST_WRITE_PAUSE_MS) ends it with 143, leaving no directory, temporary or final

    python3 tests/device/reliability.py --bin build-device/megatrain [--backend cuda|cpu]
                                        [--only CASE ...] [--keep DIR]
--backend cpu runs the same cases on the cpu backend (bitwise comparisons there; oom is skipped),
to debug the script on a machine without a GPU. Prints "ok: ..." / "FAIL: ..." lines and ends
with "reliability: N passed, M failed, K skipped" (cases); exits 1 when any case failed.
"""
import argparse
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import torch

# Seconds a single megatrain process may take: tiny runs take a second or two, most of it CUDA
# start-up; the whole script is meant to finish in under 3 minutes on an H200.
RUN_TIMEOUT = 60
KILL_STEPS, KILL_CKPT_EVERY, KILLS, KILL_SEED = 40, 2, 15, 20240520
# The cases that compare a run's final master weights with an uninterrupted run's do so bitwise on
# cpu. The cuda backend is not bitwise deterministic (atomicAdd in several kernels), so there:
#  - max |a - b| <= 2^-6 max |b|: about four bf16 ulps of the largest weight (bf16 keeps 8
#    significant bits, so an ulp is 2^-8 to 2^-7 of a value; the largest weights are the norms',
#    near 1). Adam moves a weight by at most about 1.2 lr a step, so with --lr 2e-4 (40 steps,
#    cosine: lr sums to 4.4e-3) two runs that round differently cannot drift 2^-6 apart: a
#    failure is a real error, e.g. a bad resume;
#  - and, in the kill case, ||a - b|| <= 10 ||ref2 - ref|| + ||ref - bf16(ref)||: within ten times
#    the noise floor measured here (two uninterrupted runs), plus one bf16 rounding of every weight.
LR = "2e-4"
MAX_REL_TOL = 2.0 ** -6
NOISE_FACTOR = 10.0
# The pressure case leaves this much of the GPU free: room for megatrain's CUDA context and
# handles, less than a 1B model's gradients alone (about 1.5 GB) or the tiny model at 4096 x 256.
OOM_HEADROOM = 3 << 29


class CaseFailed(Exception):
    """A precondition of the rest of the case failed: the case stops there."""


class CaseSkipped(Exception):
    """The case cannot run here (the reason is its message)."""


class Case:
    def __init__(self, name):
        self.name, self.failures = name, 0

    def check(self, cond, claim, detail=""):
        """Prints "ok: CASE: CLAIM", or "FAIL: CASE: CLAIM: DETAIL" (what was seen instead)."""
        cond = bool(cond)
        print(f"ok: {self.name}: {claim}" if cond else f"FAIL: {self.name}: {claim}: {detail}", flush=True)
        self.failures += not cond
        return cond

    def require(self, cond, claim, detail=""):
        if not self.check(cond, claim, detail):
            raise CaseFailed(claim)

    def note(self, message):
        print(f"      {self.name}: {message}", flush=True)


class Megatrain:
    """The command under test, its backend, and a corpus of byte tokens. Each process writes its
    stdout and stderr to a file of its own under WORK/logs (a pipe nobody reads could fill up and
    stall it)."""

    def __init__(self, binary, backend, work):
        self.binary, self.backend, self.work = binary, backend, work
        self.logs = os.path.join(work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.started = 0
        self.corpus = os.path.join(work, "corpus.txt")
        words = "the lord said unto moses and it was good light of day in beginning earth".split()
        rng = random.Random(12345)
        with open(self.corpus, "w") as f:
            f.write(" ".join(rng.choice(words) for _ in range(4000)))

    def tiny(self, out, *extra, data=None):
        return [self.binary, "train", "--preset", "tiny", "--seq", "16", "--batch", "2", "--backend",
                self.backend, "--eval-every", "0", "--data", data or self.corpus, "--out", out,
                *map(str, extra)]

    def start(self, args, env=None):
        """A started process; its output is read with output(p) once it has ended."""
        self.started += 1
        p_log = os.path.join(self.logs, f"{self.started:03d}.log")
        with open(p_log, "w") as log:
            log.write(" ".join(args) + "\n")
            log.flush()
            p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})})
        p.log = p_log
        return p

    @staticmethod
    def output(p):
        """What the process wrote (the log's first line is its command line)."""
        with open(p.log, errors="replace") as f:  # sampled text need not be UTF-8
            f.readline()
            return f.read()

    def wait(self, p, timeout=RUN_TIMEOUT):
        """(exit status, output); the status is negative for a signal, None on a timeout."""
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return None, self.output(p)
        return p.returncode, self.output(p)

    def run(self, args, env=None, timeout=RUN_TIMEOUT):
        return self.wait(self.start(args, env), timeout)


def run_dir(mt, name):
    path = os.path.join(mt.work, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def count_lines(path):
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for _ in f)


def ended(code):
    if code is None:
        return "timed out"
    return f"killed by signal {-code}" if code < 0 else f"exit {code}"


def last_lines(text, n=6):
    return " | ".join(text.strip().splitlines()[-n:])


def found(pattern, text):
    """The first line of text that matches pattern, or ""."""
    m = re.search(f"[^\n]*(?:{pattern})[^\n]*", text)
    return m.group(0) if m else ""


# ---- checkpoints (src/io/checkpoint.h) ----

XXH_M = (1 << 64) - 1
XXH_P = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
         0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & XXH_M


def _xxh_round(acc, lane):
    return _rotl((acc + lane * XXH_P[1]) & XXH_M, 31) * XXH_P[0] & XXH_M


def xxh64(data, seed=0):
    """XXH64, as the checkpoint manifest records each blob's payload (the stdlib has none)."""
    p1, p2, p3, p4, p5 = XXH_P
    n, i = len(data), 0
    if n >= 32:
        acc = [(seed + p1 + p2) & XXH_M, (seed + p2) & XXH_M, seed, (seed - p1) & XXH_M]
        i = n // 32 * 32
        for lanes in struct.iter_unpack("<4Q", memoryview(data)[:i]):
            acc = [_xxh_round(a, lane) for a, lane in zip(acc, lanes)]
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & XXH_M
        for a in acc:
            h = ((h ^ _xxh_round(0, a)) * p1 + p4) & XXH_M
    else:
        h = (seed + p5) & XXH_M
    h = (h + n) & XXH_M
    for (k,) in struct.iter_unpack("<Q", memoryview(data)[i:i + (n - i) // 8 * 8]):
        h = (_rotl(h ^ _xxh_round(0, k), 27) * p1 + p4) & XXH_M
    i += (n - i) // 8 * 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * p1 & XXH_M), 23) * p2 + p3) & XXH_M
        i += 4
    for byte in data[i:]:
        h = _rotl(h ^ (byte * p5 & XXH_M), 11) * p1 & XXH_M
    for shift, prime in ((33, p2), (29, p3)):
        h = (h ^ (h >> shift)) * prime & XXH_M
    return h ^ (h >> 32)


def read_blob(path):
    """The payload of a blob file: "MTCKBLOB", u32 version, u32 header size, u64 payload size."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24 or data[:8] != b"MTCKBLOB":
        raise ValueError(f"{path}: not a checkpoint blob")
    _, header, size = struct.unpack_from("<IIQ", data, 8)
    if header < 24 or header + size != len(data):
        raise ValueError(f"{path}: header says {size} payload bytes after {header}, file has {len(data)}")
    return data[header:]


def verify_checkpoint(ckpt):
    """None when every blob the manifest lists has its size and checksum, else what is wrong."""
    try:
        with open(os.path.join(ckpt, "manifest.json")) as f:
            manifest = json.load(f)
        for blob in manifest["blobs"]:
            payload = read_blob(os.path.join(ckpt, blob["file"]))
            if len(payload) != blob["bytes"]:
                return f"{blob['file']}: {len(payload)} bytes, the manifest says {blob['bytes']}"
            if f"{xxh64(payload):016x}" != blob["xxh64"]:
                return f"{blob['file']}: checksum mismatch"
    except (OSError, ValueError, KeyError) as e:
        return str(e)
    return None


def checkpoint_step(ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        return json.load(f)["meta"]["step"]


def complete_checkpoints(run):
    """ckpt-<step> directories with a manifest, oldest first (not the .tmp-/.old- of a write)."""
    dirs = (os.path.dirname(m) for m in glob.glob(os.path.join(run, "ckpt-*", "manifest.json")))
    return sorted(d for d in dirs if re.fullmatch(r"ckpt-\d+", os.path.basename(d)))


def ckpt_path(run, step):
    return os.path.join(run, f"ckpt-{step:06d}")


def blob_floats(run, step, name="master"):
    """A checkpoint blob of fp32 values (master weights, Adam moments) as a tensor."""
    payload = read_blob(os.path.join(ckpt_path(run, step), name + ".bin"))
    return torch.frombuffer(bytearray(payload), dtype=torch.float32)


def fingerprint(run):
    """Every file under run with its bytes' hash: equal fingerprints mean nothing was written."""
    out = {}
    for root, _, files in os.walk(run):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, run)] = hashlib.sha256(f.read()).hexdigest()
    return out


def damaged_checkpoints(run):
    """"ckpt-N: what is wrong" for each complete checkpoint that does not verify."""
    problems = ((os.path.basename(c), verify_checkpoint(c)) for c in complete_checkpoints(run))
    return [f"{name}: {problem}" for name, problem in problems if problem]


def check_all_verify(case, run, when):
    count, bad = len(complete_checkpoints(run)), damaged_checkpoints(run)
    case.check(count and not bad, f"{when}: all {count} checkpoints verify", "; ".join(bad) or "none there")


def compare_weights(case, mt, a, b, what):
    """Bitwise on cpu; max |a - b| <= MAX_REL_TOL max |b| on cuda."""
    diff = (a - b).abs().max().item() / b.abs().max().item()
    if mt.backend == "cpu":
        case.check(torch.equal(a, b), f"{what}: bitwise equal (cpu)", f"max |diff| {diff:.3g} of max |w|")
    else:
        case.check(diff <= MAX_REL_TOL, f"{what}: max |diff| {diff:.3g} of max |w| is within {MAX_REL_TOL:.3g}",
                   "too far")


# ---- the cases ----

def newest_logged_step(metrics, offset):
    """The step of the last line metrics.jsonl got past byte `offset` (what this start logged), or 0."""
    try:
        with open(metrics, "rb") as f:
            # A resume cuts the abandoned steps' lines off the file, so `offset` may now fall
            # inside a line or past the end: only whole lines count.
            f.seek(min(offset, os.fstat(f.fileno()).st_size))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return 0
    steps = [json.loads(line)["step"] for line in lines if line.startswith("{") and line.endswith("}")]
    return steps[-1] if steps else 0


def kill_run_args(mt, out):
    """One command line for every start: --resume begins afresh in an empty run directory."""
    return mt.tiny(out, "--steps", KILL_STEPS, "--ckpt-every", KILL_CKPT_EVERY, "--keep", 2, "--lr", LR,
                   "--resume")


def reference_run(case, mt, name):
    """An uninterrupted run: its final master weights, its start-up time (until the first step is
    logged) and its seconds per step, checkpoints included."""
    ref = run_dir(mt, name)
    metrics = os.path.join(ref, "metrics.jsonl")
    t0 = time.monotonic()
    p = mt.start(kill_run_args(mt, ref))
    startup = None
    while p.poll() is None:
        if startup is None and newest_logged_step(metrics, 0) >= 1:
            startup = time.monotonic() - t0
        time.sleep(0.002)
    duration = time.monotonic() - t0
    case.require(p.returncode == 0, f"uninterrupted run {name} succeeds",
                 f"{ended(p.returncode)}: {last_lines(mt.output(p))}")
    startup = startup if startup is not None else duration / 2
    return blob_floats(ref, KILL_STEPS), startup, (duration - startup) / (KILL_STEPS - 1)


def case_kill(case, mt):
    ref, startup, per_step = reference_run(case, mt, "reference")
    ref2, _, _ = reference_run(case, mt, "reference2")
    case.note(f"uninterrupted run: start-up {startup:.2f} s, then {per_step * 1e3:.1f} ms a step (checkpoints "
              "included)")

    killed = run_dir(mt, "killed")
    metrics = os.path.join(killed, "metrics.jsonl")
    rng = random.Random(KILL_SEED)
    hits = torn = 0
    damaged = []
    for k in range(KILLS):
        done = max([checkpoint_step(c) for c in complete_checkpoints(killed)] or [0])
        offset = os.path.getsize(metrics) if os.path.exists(metrics) else 0
        p = mt.start(kill_run_args(mt, killed))
        if k % 5 == 0:
            # Every fifth kill lands in the start-up (loading, tidying what the last kill left).
            delay = rng.uniform(0, startup)
            moment = f"{delay:.2f} s into the start-up"
        else:
            # The others wait for a step 2 to 8 past the last checkpoint (the 12 of them move the
            # run about 40 steps on, so that they spread over the whole run, the final save
            # included) and then for a random part of two steps, checkpoint writes included.
            target = min(done + rng.randint(2, 8), KILL_STEPS)
            deadline = time.monotonic() + RUN_TIMEOUT
            while p.poll() is None and newest_logged_step(metrics, offset) < target - 1:
                if time.monotonic() > deadline:
                    case.require(False, f"start {k + 1} reaches step {target - 1}", "no progress in a minute")
                time.sleep(0.001)
            delay = rng.uniform(0, 2 * per_step)
            moment = f"{delay * 1e3:.0f} ms after step {target - 1}"
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
        code, err = mt.wait(p)
        if code not in (0, -signal.SIGKILL):
            case.require(False, f"start {k + 1} ends by SIGKILL or succeeds", f"{ended(code)}: {last_lines(err)}")
        hits += code == -signal.SIGKILL
        torn += any(".tmp-" in e or ".old-" in e for e in os.listdir(killed))
        last_step = newest_logged_step(metrics, offset)
        damaged += [f"after kill {k + 1} ({moment}), {bad}" for bad in damaged_checkpoints(killed)]
    case.check(not damaged, f"every complete checkpoint verifies after each of the {KILLS} kills",
               "; ".join(damaged))
    case.note(f"seed {KILL_SEED}: {hits} of {KILLS} kills landed before the run ended (the last after step "
              f"{last_step}), {torn} inside a checkpoint write")
    code, err = mt.run(kill_run_args(mt, killed))
    case.require(code == 0, "the last resume succeeds", f"{ended(code)}: {last_lines(err)}")
    check_all_verify(case, killed, "after the last resume")
    final = ckpt_path(killed, KILL_STEPS)
    case.require(os.path.isdir(final) and checkpoint_step(final) == KILL_STEPS,
                 f"the final checkpoint is of step {KILL_STEPS}", f"newest: {complete_checkpoints(killed)[-1:]}")

    got = blob_floats(killed, KILL_STEPS)
    scale = ref.abs().max().item()
    noise_max = (ref2 - ref).abs().max().item() / scale
    noise_l2 = (ref2 - ref).norm().item()
    rounding_l2 = (ref.bfloat16().float() - ref).norm().item()
    kill_l2 = (got - ref).norm().item()
    case.note(f"noise floor (two uninterrupted runs): max |diff| {noise_max:.3g} of max |w| = {scale:.3g}, "
              f"L2 {noise_l2:.3g}; one bf16 rounding of every weight: L2 {rounding_l2:.3g}")
    compare_weights(case, mt, got, ref, f"master after {hits} kills vs uninterrupted")
    if mt.backend == "cpu":
        case.check(noise_l2 == 0, "two uninterrupted cpu runs are bitwise equal", f"L2 diff {noise_l2:.3g}")
    else:
        bound = NOISE_FACTOR * noise_l2 + rounding_l2
        case.check(kill_l2 <= bound, f"master after kills: L2 diff {kill_l2:.3g} is within {NOISE_FACTOR:g} x the "
                   f"noise floor + one bf16 rounding = {bound:.3g}", "too far")
        case.check(noise_max <= MAX_REL_TOL, f"the noise floor's max |diff| {noise_max:.3g} is under the "
                   f"tolerance {MAX_REL_TOL:.3g}", "the tolerance is not justified on this machine")


def case_sigterm(case, mt):
    run = run_dir(mt, "sigterm")
    p = mt.start(mt.tiny(run, "--steps", 100000, "--ckpt-every", 100000))
    metrics = os.path.join(run, "metrics.jsonl")
    deadline = time.monotonic() + RUN_TIMEOUT
    while p.poll() is None and time.monotonic() < deadline:
        if count_lines(metrics) >= 3:
            break
        time.sleep(0.01)
    case.require(p.poll() is None, "the run is still training after 3 steps", ended(p.returncode))
    p.send_signal(signal.SIGTERM)
    code, err = mt.wait(p)
    case.require(code == 128 + signal.SIGTERM, "SIGTERM mid-run: exit 143 (128 + the signal)",
                 f"{ended(code)}: {last_lines(err)}")
    m = re.search(r"stopped on request at step (\d+)", err)
    case.require(m is not None, "it says at which step it stopped", last_lines(err, 2))
    step = int(m.group(1))
    ckpt = ckpt_path(run, step)
    case.check(os.path.isdir(ckpt) and verify_checkpoint(ckpt) is None and checkpoint_step(ckpt) == step,
               f"a good checkpoint of step {step}, the step it stopped at", str(complete_checkpoints(run)))
    code, err = mt.run(mt.tiny(run, "--steps", step + 3, "--resume"))
    case.check(code == 0 and verify_checkpoint(ckpt_path(run, step + 3)) is None,
               f"--resume completes steps {step + 1}..{step + 3}", f"{ended(code)}: {last_lines(err)}")


def case_oom(case, mt):
    if mt.backend != "cuda":
        raise CaseSkipped("needs a GPU (run with --backend cuda)")
    run = run_dir(mt, "oom")
    code, err = mt.run(mt.tiny(run, "--steps", 4, "--ckpt-every", 2))
    case.require(code == 0, "a tiny run before the pressure succeeds", f"{ended(code)}: {last_lines(err)}")
    free, total = torch.cuda.mem_get_info()
    case.require(free > 2 * OOM_HEADROOM, "the GPU has memory to take", f"{free / 2**30:.2f} GiB free")
    hog = torch.empty(free - OOM_HEADROOM, dtype=torch.uint8, device="cuda")
    try:
        free_now, _ = torch.cuda.mem_get_info()
        case.note(f"torch holds {hog.numel() / 2**30:.1f} GiB of {total / 2**30:.1f} GiB; "
                  f"{free_now / 2**30:.2f} GiB free")
        big = run_dir(mt, "oom-1b")
        t0 = time.monotonic()
        code, err = mt.run([mt.binary, "train", "--backend", "cuda", "--preset", "llama-3.2-1b", "--data",
                            mt.corpus, "--steps", "1", "--out", big])
        seconds = time.monotonic() - t0
        case.check(code is not None and code > 0, "llama-3.2-1b under pressure exits non-zero", ended(code))
        message = found(r"device memory.*\d+\.\d+ GB|\d+\.\d+ GB.*device memory", err)
        case.check(message, f"the message names device memory and the numbers: {message or '-'}", last_lines(err))
        case.check(seconds < 20, f"refused up front, in {seconds:.1f} s", "too slow")
        case.check(not complete_checkpoints(big), "no checkpoint written", str(complete_checkpoints(big)))

        # A wide batch under the same pressure is no refusal: the planner cuts the micro-batch into
        # chunks and attention into windows from what the GPU has, so it trains in the 1.5 GiB left.
        # (A resumed run keeps its batch and sequence length, so it is a fresh run beside the tiny one.)
        before = fingerprint(run)
        wide = run_dir(mt, "oom-wide")
        code, err = mt.run(mt.tiny(wide, "--steps", 6, "--ckpt-every", 2, "--batch", 4096, "--seq", 256))
        case.check(code == 0, "tiny with --batch 4096 --seq 256 trains in what is left", f"{ended(code)}: "
                   f"{last_lines(err)}")
        case.check(verify_checkpoint(ckpt_path(wide, 6)) is None, "its last checkpoint verifies",
                   verify_checkpoint(ckpt_path(wide, 6)))
        case.check(fingerprint(run) == before, "the tiny run's directory is unchanged", "it changed")
    finally:
        del hog
        torch.cuda.empty_cache()
    case.check(verify_checkpoint(ckpt_path(run, 4)) is None, "the last checkpoint verifies",
               verify_checkpoint(ckpt_path(run, 4)))
    code, err = mt.run(mt.tiny(run, "--steps", 6, "--ckpt-every", 2, "--resume"))
    case.check(code == 0 and verify_checkpoint(ckpt_path(run, 6)) is None, "a plain --resume then completes",
               f"{ended(code)}: {last_lines(err)}")


def case_alloc(case, mt):
    run = run_dir(mt, "alloc")
    # A constant learning rate: a 4-step run resumed to 6 steps takes a 6-step run's steps.
    args = lambda out, steps, *extra: mt.tiny(out, "--steps", steps, "--ckpt-every", 2, "--keep", 0, "--lr", LR,
                                              "--schedule", "constant", "--warmup", 0, *extra)
    code, err = mt.run(args(run, 4))
    case.require(code == 0, "the first run succeeds", f"{ended(code)}: {last_lines(err)}")
    for spec in ("pinned:1", "pinned:3", "device:1", "device:5"):
        before = fingerprint(run)
        code, err = mt.run(args(run, 6, "--resume"), env={"MT_TEST_ALLOC_FAIL": spec})
        message = found(r"cannot allocate \d+ bytes of [\w() ]*memory for .*\(test hook MT_TEST_ALLOC_FAIL\)", err)
        case.check(code == 1 and message, f"{spec}: exit 1 with {message or 'a message naming the allocation'}",
                   f"{ended(code)}: {last_lines(err)}")
        case.check(fingerprint(run) == before, f"{spec}: the run directory is unchanged", "it changed")
    case.check(verify_checkpoint(ckpt_path(run, 4)) is None, "the last checkpoint verifies",
               verify_checkpoint(ckpt_path(run, 4)))
    code, err = mt.run(args(run, 6, "--resume"))
    case.require(code == 0, "a plain --resume then completes", f"{ended(code)}: {last_lines(err)}")
    straight = run_dir(mt, "alloc-straight")
    code, err = mt.run(args(straight, 6))
    case.require(code == 0, "the uninterrupted run succeeds", f"{ended(code)}: {last_lines(err)}")
    compare_weights(case, mt, blob_floats(run, 6), blob_floats(straight, 6), "master after the failures and resume")


def case_fault(case, mt):
    run = run_dir(mt, "fault")
    args = lambda out, *extra: mt.tiny(out, "--steps", 6, "--ckpt-every", 2, "--keep", 0, "--lr", LR, *extra)
    code, err = mt.run(args(run), env={"MT_TEST_DEVICE_FAULT_STEP": "5"})
    message = found("device fault", err)
    case.check(code == 1 and message, f"a device fault at step 5: exit 1 with {message or 'a message saying so'}",
               f"{ended(code)}: {last_lines(err)}")
    case.check(verify_checkpoint(ckpt_path(run, 4)) is None, "the step-4 checkpoint verifies",
               verify_checkpoint(ckpt_path(run, 4)))
    case.check(not os.path.exists(ckpt_path(run, 5)) and not os.path.exists(ckpt_path(run, 6)),
               "nothing written after the fault", str(complete_checkpoints(run)))
    code, err = mt.run(args(run, "--resume"))
    case.require(code == 0, "--resume completes", f"{ended(code)}: {last_lines(err)}")
    straight = run_dir(mt, "fault-straight")
    code, err = mt.run(args(straight))
    case.require(code == 0, "the uninterrupted run succeeds", f"{ended(code)}: {last_lines(err)}")
    compare_weights(case, mt, blob_floats(run, 6), blob_floats(straight, 6), "master after the fault and resume")


def case_nan(case, mt):
    run = run_dir(mt, "nan")
    code, err = mt.run(mt.tiny(run, "--steps", 4, "--ckpt-every", 1, "--keep", 0), env={"MT_TEST_NAN_STEP": "3"})
    case.require(code == 0, "the run with a NaN gradient at step 3 succeeds", f"{ended(code)}: {last_lines(err)}")
    case.check("step 3 skipped" in err, "the output notes the skip", last_lines(err))
    with open(os.path.join(run, "metrics.jsonl")) as f:
        flags = "".join("1" if json.loads(line)["skipped"] else "0" for line in f if '"skipped"' in line)
    case.check(flags == "0010", "metrics.jsonl flags step 3 (only) as skipped", f"flags by step: {flags}")
    # The masters are untouched bit for bit. The moments are too where the update waited for the
    # norm; after an unclipped step it was taken ahead as the gradients came and undone once the
    # norm was known: back to within fp32 rounding of the moment terms (optim/adamw.h's AHEAD_UNDO).
    for blob in ("master", "adam_m", "adam_v"):
        s2, s3, s4 = (blob_floats(run, s, blob) for s in (2, 3, 4))
        drift = (s3 - s2).abs().max().item()
        scale = max(s2.abs().max().item(), s4.abs().max().item())
        kept = torch.equal(s2, s3) if blob == "master" else drift <= 2.0 ** -21 * scale
        case.check(kept and not torch.equal(s3, s4), f"{blob}: the skipped step 3 changed nothing, step 4 updated",
                   f"step 3 against step 2: max |diff| {drift:.3g} of max |value| {scale:.3g}, "
                   f"step 4 equal to step 3: {torch.equal(s3, s4)}")


def case_token(case, mt):
    data = os.path.join(mt.work, "bad-tokens.bin")
    tokens = [ord(c) for c in "and it was good " * 200]
    tokens[1234] = 300  # the tiny model's vocabulary is 256
    header = [20240520, 1, len(tokens)] + [0] * 253  # llm.c's .bin: 256 int32, then uint16 tokens
    with open(data, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))
    code, err = mt.run(mt.tiny(run_dir(mt, "token"), "--steps", 2, data=data))
    case.check(code is not None and code > 0, "token id 300 with a vocabulary of 256: exit non-zero", ended(code))
    message = found(r"\b300\b.*\b256\b", err)
    case.check(message, f"the message names the token and the vocabulary: {message or '-'}", last_lines(err))


def trained_run(case, mt, name, steps=4):
    run = run_dir(mt, name)
    code, err = mt.run(mt.tiny(run, "--steps", steps))
    case.require(code == 0, f"a {steps}-step run on the {mt.backend} backend", f"{ended(code)}: {last_lines(err)}")
    return run


def case_sample(case, mt):
    run = trained_run(case, mt, "sample")
    args = [mt.binary, "sample", run, "--prompt", "the lord", "--tokens", "40", "--temperature", "0", "--backend",
            mt.backend]
    code, out = mt.run(args)
    case.require(code == 0, "sample of the run: exit 0", f"{ended(code)}: {last_lines(out)}")
    text = out[out.find("the lord"):] if "the lord" in out else ""
    case.check(len(text) >= len("the lord") + 40, "the prompt and 40 generated bytes are printed", last_lines(out, 3))
    code, again = mt.run(args)
    text_again = again[again.find("the lord"):] if "the lord" in again else ""
    case.check(code == 0 and text_again == text, "greedy sampling gives the same text twice",
               f"{text!r} then {text_again!r}")
    code, err = mt.run(args, env={"MT_TEST_HOST_AVAILABLE": "1kB"})
    refusal = found("sampling needs", err)
    case.check(code == 1 and "working weights" in refusal, f"the memory check counts the working weights: {refusal}",
               f"{ended(code)}: {last_lines(err)}")
    case.check(not any(c in refusal for c in ("fp32 master", "Adam moments", "gradients")),
               "and no master weights, moments or gradients", refusal)
    p = mt.start([*args[:-6], "--tokens", "1000000", "--backend", mt.backend])
    time.sleep(3)
    case.require(p.poll() is None, "a long generation is still running after 3 s", ended(p.returncode))
    p.send_signal(signal.SIGINT)
    code, err = mt.wait(p)
    case.check(code == 128 + signal.SIGINT, "SIGINT mid-generation: exit 130", f"{ended(code)}: {last_lines(err)}")


def load_safetensors(path):
    """{name: tensor} of a safetensors file: an 8-byte header length, the JSON header, the data."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[t["dtype"]]).reshape(t["shape"]) if raw else torch.empty(0)
    return out


def case_export(case, mt):
    run = trained_run(case, mt, "export")
    out = run_dir(mt, "exported")
    code, err = mt.run([mt.binary, "export", run, out, "--dtype", "bf16"])
    case.require(code == 0, "export of the run: exit 0", f"{ended(code)}: {last_lines(err)}")
    tensors = load_safetensors(os.path.join(out, "model.safetensors"))
    got = sum(t.double().pow(2).sum().item() for t in tensors.values())
    master = blob_floats(run, 4).bfloat16().double()
    want = master.pow(2).sum().item()
    case.check(all(t.dtype == torch.bfloat16 for t in tensors.values()), "every tensor is bf16",
               str({t.dtype for t in tensors.values()}))
    case.check(abs(got - want) <= 1e-9 * want, f"the tensors' squares sum to the bf16 masters' ({got:.6g})",
               f"{got!r} against {want!r}")
    late = run_dir(mt, "exported-late")
    p = mt.start([mt.binary, "export", run, late], env={"MT_TEST_WRITE_PAUSE_MS": "300"})
    deadline = time.monotonic() + RUN_TIMEOUT
    while p.poll() is None and not glob.glob(late + ".tmp-*") and time.monotonic() < deadline:
        time.sleep(0.01)
    case.require(p.poll() is None, "the paced export is writing", ended(p.returncode))
    p.send_signal(signal.SIGTERM)
    code, err = mt.wait(p)
    case.check(code == 128 + signal.SIGTERM, "SIGTERM mid-export: exit 143", f"{ended(code)}: {last_lines(err)}")
    left = glob.glob(late + "*")
    case.check(not left, "nothing is left (no temporary directory, no export)", str(left))


CASES = {"kill": case_kill, "sigterm": case_sigterm, "oom": case_oom, "alloc": case_alloc, "fault": case_fault,
         "nan": case_nan, "token": case_token, "sample": case_sample, "export": case_export}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="build/megatrain")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--only", action="append", choices=sorted(CASES), help="run only these cases")
    parser.add_argument("--keep", help="work in this directory and keep it")
    opts = parser.parse_args()
    work = opts.keep or tempfile.mkdtemp(prefix="mt-reliability-")
    os.makedirs(work, exist_ok=True)
    mt = Megatrain(os.path.abspath(opts.bin), opts.backend, work)
    passed = failed = skipped = 0
    start = time.monotonic()
    try:
        for name in opts.only or CASES:
            case, t0 = Case(name), time.monotonic()
            try:
                CASES[name](case, mt)
            except CaseFailed:
                pass
            except CaseSkipped as e:
                print(f"skip: {name}: {e}", flush=True)
                skipped += 1
                continue
            except Exception as e:  # a bug in the case itself: report it, go on with the next
                case.check(False, "the case runs to its end", f"{type(e).__name__}: {e}")
            case.note(f"{time.monotonic() - t0:.1f} s")
            passed += case.failures == 0
            failed += case.failures != 0
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - start
    print(f"reliability: {passed} passed, {failed} failed, {skipped} skipped ({opts.backend} backend, "
          f"{seconds:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
