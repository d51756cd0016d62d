"""Asynchronous off-policy rollouts (``algorithm.async_rollout``): a separate process samples the next steps while the
trainer updates on this one; [323]'s off-policy clip (``algorithm.clip = off_policy``, required) takes the ratio to
the behaviour policy (``Rollout.old_logp``) with the trust region around the current weights.

The rollout process is a ``torch.multiprocessing`` "spawn" process that builds its own copy of the policy from the
config and receives the trainable weights through shared-memory tensors. Two messages flow to it, in order:
``("weights", v)`` (the shared buffer holds version ``v``, the weights after ``v`` steps: copy it) and
``("rollout", j, rows, n)`` (sample step ``j``); it answers ``("rollout", j, rollout, policy state)``.

Schedule (deterministic: which weights sample which step never depends on timing). With ``S = max_staleness``,
``E = sync_every`` and lookahead ``D = S − E + 1``, step ``j`` is sampled with version

    v(j) = b + E·⌊(j − 1 − D − b) / E⌋   (b when j − 1 − D < b),

where ``b`` is the newest *drain point* before ``j``: the run's start and every checkpoint step (``run.save_every``).
The rollout of step ``j`` is sent at the start of step ``j − D`` (when the trainer holds version ``j − 1 − D``), never
before the step of the drain point before it has ended, so its staleness ``j − 1 − v(j)`` is at most ``S`` (logged
as ``rollout/staleness``). At a checkpoint the pipeline is empty and the rollouts after it use the weights saved in
it: a run interrupted and resumed from a checkpoint equals the uninterrupted one (the rollout process's generator
states are saved in the checkpoint's trainer state). The one exception: a checkpoint written because
``run.max_time_minutes`` ran out, at a step that is no drain point; the run resumed from it drains there, so its
later rollouts use newer weights than the uninterrupted run's would have.

Log-probs: the rollout's own (``Rollout.old_logp``) are the behaviour policy's ``π_β``, the clip's ``rollout_logp``;
its trust region is centred on the current weights ``π_k``: the detached current log-probs with one optimizer step per
batch, otherwise a scoring pass before the update, also for families whose sampler log-probs are exact (those serve as
``π_k`` directly only when the rollout is synchronous).

The trainer plans each step's prompts when it sends the rollout (seeded like the synchronous step), so sample-source
rules, which choose from the steps before, are rejected in async mode (config check), as are reward probes.
"""

from __future__ import annotations

import importlib
import queue
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
import torch.multiprocessing as mp

from genalign.algorithms import names_by
from genalign.policies import load_family
from genalign.policies.base import Rollout, RolloutRequest
from genalign.trainer.torch_settings import apply_torch_settings

#: the recipe's TrainingRun (not imported: the recipe imports this module)
TrainingRun = Any

#: ``seed_step(seed, step, rank)`` of the recipe (passed in, so that this module does not import the recipe)
Seeder = Callable[[int, int, int], None]


def rollout_version(step: int, *, base: int, lookahead: int, sync_every: int) -> int:
    """``v(step)``: the policy version (steps of updates) that samples ``step`` after drain point ``base``."""
    newest = step - 1 - lookahead
    return base if newest < base else base + sync_every * ((newest - base) // sync_every)


class AsyncRollout:
    """The rollout process and its schedule, owned by a :class:`~genalign.trainer.recipe.TrainingRun`; a context
    manager that stops the process on exit. Call :meth:`send_ahead` at the start of each step, then :meth:`receive`.

    Args:
        seeder: the recipe's ``seed_step`` (each step's prompts and samples are seeded by the step).
    """

    def __init__(self, seeder: Seeder) -> None:
        self.seeder = seeder
        self.process: Any = None
        self.worker_state: dict[str, Any] | None = None  # the rollout policy's state after the last received step
        self.pending: dict[int, tuple[torch.Tensor, int]] = {}  # step -> (stream positions, version)
        self.base = self.sent = self.sent_version = 0

    # ---- checkpoint state ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"policy_state": self.worker_state} if self.worker_state is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.worker_state = state.get("policy_state")

    # ---- schedule ----------------------------------------------------------------------------------------------------
    def send_ahead(self, run: TrainingRun, step: int) -> None:
        """At the start of ``step`` (the trainer holds version ``step − 1``): start the process on the first call,
        then send every rollout the schedule allows now, with the current weights when a rollout needs them."""
        cfg, save_every = run.config.algorithm.async_rollout, run.config.run.save_every
        if self.process is None:
            self._start(run)
            self.base = self.sent = step - 1
            self.sent_version = -1
        elif save_every and (step - 1) % save_every == 0:  # a checkpoint step ended: drain point
            assert self.sent == step - 1 and not self.pending, "the pipeline is empty at a checkpoint"
            self.base = step - 1
        drain = min(((step + save_every - 1) // save_every) * save_every if save_every else run.config.run.max_steps,
                    run.config.run.max_steps)  # fmt: skip
        for j in range(self.sent + 1, min(step + cfg.lookahead, drain) + 1):
            version = rollout_version(j, base=self.base, lookahead=cfg.lookahead, sync_every=cfg.sync_every)
            if version != self.sent_version:
                assert version == step - 1, "a version is sent while the trainer holds it"
                self._send_weights(run, version)
            self._send_rollout(run, j, version)
        self.seeder(run.config.run.seed, step, run.rank)  # leave the trainer's randomness as the step expects

    def receive(self, step: int) -> Rollout:
        """The rollout of ``step`` (waits for it); ``group_ids`` are stream positions, ``info`` has ``staleness``
        (versions between the sampling weights and the weights this step updates) and ``policy_version``."""
        positions, version = self.pending.pop(step)
        while True:
            try:
                message = self.results.get(timeout=1.0)
            except queue.Empty:
                if not self.process.is_alive():
                    raise RuntimeError(f"the rollout process died (exit code {self.process.exitcode})") from None
                continue
            if message[0] == "error":
                raise RuntimeError(f"the rollout process failed:\n{message[1]}")
            _, done, rollout, self.worker_state = message
            assert done == step, f"rollouts arrive in step order ({done} != {step})"
            break
        rollout.group_ids = positions[rollout.group_ids]
        rollout.info |= {"staleness": step - 1 - version, "policy_version": version}
        return rollout

    # ---- process and messages ----------------------------------------------------------------------------------------
    def _start(self, run: TrainingRun) -> None:
        config, device = run.config, torch.device(run.accelerator.device)
        if run.parallel.sharded or (device.type != "cpu" and run.world > 1):
            raise ValueError(
                "algorithm.async_rollout needs unsharded weights on one device per process; set run.distributed=ddp "
                "or none, or algorithm.async_rollout.enabled=false."
            )
        context = mp.get_context("spawn")
        self.buffer = [param.detach().to("cpu", copy=True).share_memory_() for param in run.parameters]
        self.requests, self.results, self.copied = context.Queue(), context.Queue(), context.Value("l", -1)
        family = load_family(config.policy.family)
        builder = family.__name__ if isinstance(family, ModuleType) else family.build_policy
        state = self.worker_state if self.worker_state is not None else run.policy.state_dict()
        settings = {"seed": config.run.seed, "rank": run.rank, "threads": config.algorithm.async_rollout.worker_threads,
                    "deterministic": config.run.deterministic, "device": str(device)}  # fmt: skip
        self.process = context.Process(
            target=_worker,
            args=(builder, config.policy, settings, state, self.buffer, self.requests, self.results, self.copied,
                  self.seeder),
            daemon=True,
        )  # fmt: skip
        self.process.start()

    def _send_weights(self, run: TrainingRun, version: int) -> None:
        """Copy the trainer's weights into the shared buffer once the process has copied the previous version."""
        while self.sent_version >= 0 and self.copied.value != self.sent_version:
            if not self.process.is_alive():
                raise RuntimeError(f"the rollout process died (exit code {self.process.exitcode})")
            self.process.join(timeout=0.001)
        with torch.no_grad():
            for shared, param in zip(self.buffer, run.parameters, strict=True):
                shared.copy_(param.detach())
        self.requests.put(("weights", version))
        self.sent_version = version

    def _send_rollout(self, run: TrainingRun, step: int, version: int) -> None:
        """Plan step ``step``'s prompts as :func:`~genalign.trainer.recipe.sample_step` does (kept in sync with it)
        and send this process's share."""
        self.seeder(run.config.run.seed, step, run.rank)
        sampled = run.config.algorithm.prompts_to_sample()
        sampled += -sampled % run.world
        local = sampled // run.world
        plan = run.sources.plan(run.stream, sampled, step)
        taken = plan.prompts[run.rank * local : (run.rank + 1) * local]
        self.pending[step] = (torch.tensor([prompt.position for prompt in taken], dtype=torch.long), version)
        structure = names_by("rollout", run.config.algorithm.needs())
        self.requests.put(("rollout", step, [prompt.row for prompt in taken], plan.samples_per_prompt, structure))
        self.sent = step

    def close(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.requests.put(("stop",))
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()  # it ignores SIGTERM
        self.process = None

    def __enter__(self) -> AsyncRollout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _next_message(requests: Any) -> tuple:
    """The next message; ``("stop",)`` once the trainer process is gone (killed without a chance to stop us)."""
    while True:
        try:
            return requests.get(timeout=1.0)
        except queue.Empty:
            parent = mp.parent_process()
            if parent is not None and not parent.is_alive():
                return ("stop",)


def _worker(builder, policy_config, settings, state, buffer, requests, results, copied, seeder) -> None:
    """The rollout process: build the policy, then copy weights and sample steps as the messages say. It ignores
    SIGINT and SIGTERM (a Ctrl-C reaches every process of the terminal, a scheduler may signal every process of the
    job): the trainer finishes its step, saves and stops it (genalign.trainer.shutdown)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        apply_torch_settings(settings["threads"], settings["deterministic"])
        torch.manual_seed(settings["seed"])
        build = importlib.import_module(builder).build_policy if isinstance(builder, str) else builder
        policy = build(policy_config, torch.device(settings["device"]))
        policy.load_state_dict(state)
        parameters = policy.trainable_parameters()
        while (message := _next_message(requests))[0] != "stop":
            if message[0] == "weights":
                with torch.no_grad():
                    for param, shared in zip(parameters, buffer, strict=True):
                        param.copy_(shared)
                copied.value = message[1]
                continue
            _, step, rows, samples_per_prompt, structure = message
            seeder(settings["seed"], step, settings["rank"])
            policy.on_step(step)
            started = time.perf_counter()
            rollout = policy.rollout(rows, samples_per_prompt, request=RolloutRequest(structure=structure))
            rollout.info["worker_seconds"] = time.perf_counter() - started  # logged as time/rollout_worker_s
            results.put(("rollout", step, rollout, policy.state_dict()))
    except Exception:  # reported to the trainer, which raises it
        results.put(("error", traceback.format_exc()))
