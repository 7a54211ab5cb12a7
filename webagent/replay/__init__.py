"""The replay cache: re-run recorded steps without any model call while the page still matches.

A recording is, per check (or run), the list of steps that worked: what the agent saw (a
``Fingerprint``: URL, title, a hash of the visible text and form values, a perceptual hash of the
screenshot), the action, the resolved click point and, for the final answer, the validator's
verdict then (kept for the record, never replayed). A run with a cache replays recorded steps in
order while each new observation matches the recorded one; at the first mismatch it hands over to
the models for the rest of the run (re-planning) and, when the run then succeeds, its steps
replace the recording (self-healing).

**A cache is code-equivalent**: what it holds is replayed as the agent's own actions, so it is
untrusted until reviewed, like a suite. What it may make a run do is bounded:

* a replayed final answer is judged again by the validator (one call): a cache never claims the
  validator's acceptance (``CachedStep.verdict`` is not replayed);
* a recording is bound to the origin it was made from (its start URL's scheme, host and port): a
  look-alike page on another origin replays nothing, unless the operator opts in (``[agent]
  replay_any_origin``, ``--cache-any-origin``: the same suite against staging and production);
* a step that leaves the start origin (a ``goto`` elsewhere, a step recorded on a page of another
  origin), types a secret (``{{NAME}}``), uploads a file or asks a person is never replayed: the
  policy is asked from there (``sensitive``); so is a turn of several actions if any of them
  would be, or if it carries more than the run lets one turn take (``max_actions_per_turn``);
* a cache file not owned by the user (or root), or writable by group or others, is refused with
  one line; it is written 0600.

Checks and extractions on a page (``Pilot.check``, ``Pilot.extract``) are one model call each:
their answers are kept per key (the statement, or what was extracted and the schema's digest) with
the fingerprint of the page they were given on, and an observation that matches one is answered
from the cache (``answer_for``). Only an answer that held or validated is kept.

The file is stable, human-diffable JSON (sorted keys, two-space indent, one check per key) meant to
be committed next to a suite. It is rewritten atomically and only when a recording changed; several
processes may share it (a suite on Ray's actors): each write merges the writer's own changes into
the file as it is then, under an exclusive lock of its directory.
"""

from .cache import ReplayCache, StepReplay
from .views import CachedAnswer, CachedStep, fingerprint, image_hash, origin_of, sensitive, text_hash

__all__ = [
    "CachedAnswer",
    "CachedStep",
    "ReplayCache",
    "StepReplay",
    "fingerprint",
    "image_hash",
    "origin_of",
    "sensitive",
    "text_hash",
]
