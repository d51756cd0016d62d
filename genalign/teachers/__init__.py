"""Teachers: models that judge the student's own samples token by token, for on-policy distillation.

A teacher is configured like the policy's reference (``algorithm.teacher``, :mod:`genalign.teachers.config`): another
model of the family with the same tokenizer, the policy's own base or current weights with privileged context, or a
remote server that returns per-token log-probs. Every step the trainer asks it for the teacher signals the configured
options read (:mod:`genalign.algorithms.signals`, producer ``teacher``: the teacher's log-prob of each sampled action,
its entropy, its log-prob under a contrast context, which samples it scored), computed in the family's chunked head
pass (no ``[n, T, V]`` logits); distillation credit rules turn them into per-action advantages
(``genalign/experimental/credit/distillation.py``).

Modules: :mod:`~genalign.teachers.config` (the config section, light: read at config load),
:mod:`~genalign.teachers.context` (privileged-context templates), :mod:`~genalign.teachers.vocabulary` (the
same-tokenizer check), :mod:`~genalign.teachers.local` (model and self teachers), :mod:`~genalign.teachers.remote`
(the HTTP teacher), :mod:`~genalign.teachers.build` (:func:`~genalign.teachers.build.build_teacher`).
"""
