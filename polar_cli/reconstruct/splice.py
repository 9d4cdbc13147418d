"""The boundary rule of prefix merging: what goes between two consecutive calls of a chain.

Owns: `splice_polar` and `splice_exact`, which, for calls m and m+1 of one chain, compute the
inserted context u_m (mask 0) and whether the reconstructed prefix equals p_{m+1} exactly, or
say the boundary is unsafe (no end-of-turn id in the tail: the caller must cut the chain).
Out of scope: choosing the chain (reconstruct/builder.py), hashing keys (prefix_keys.py).

With t_m = p_{m+1}[len(p_m):] (the canonical tail) and k_m = the first end-of-turn id in t_m
(DESIGN.md, "Prefix merging"):

- polar: u_m = t_m[k_m+1:] if a_m ends with the end-of-turn id else t_m[k_m:]. The raw a_m is
  kept and the canonical rendering of a_m (t_m up to u_m) is dropped; the boundary is exact when
  a_m || u_m == t_m, i.e. when the canonical rendering re-tokenised to the very same ids.
- exact: the caller has checked that p_{m+1} starts with p_m || a_m, so t_m = a_m || r and
  u_m = r: the reconstructed prefix is p_{m+1} itself. This is the polar formula whenever a_m's
  only end-of-turn id is its last token or r starts with one (the normal case); where they
  differ (a stop string the harness re-inserted after a truncated a_m), exact mode keeps the
  context it promises rather than dropping r's first tokens.

In both modes a tail without any end-of-turn id is unsafe: we never invent one.
Work is linear in |t_m|: nothing before len(p_m) is looked at again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Boundary:
    """The join between two consecutive calls of a chain."""

    context: list[int]  # u_m: inserted (mask 0) tokens between a_m and a_{m+1}
    exact: bool  # the reconstructed prefix of call m+1 equals its recorded prompt here


def splice_polar(
    prev_prompt_len: int, sampled: list[int], next_prompt: list[int], eot_id: int
) -> Boundary | None:
    """The polar boundary between a call (prompt length `prev_prompt_len`, sampled ids
    `sampled`) and the next call of its chain (`next_prompt`, which starts with the previous
    prompt and is strictly longer). None when the tail holds no end-of-turn id (unsafe)."""
    tail = next_prompt[prev_prompt_len:]
    try:
        k = tail.index(eot_id)
    except ValueError:
        return None
    ends_with_eot = len(sampled) > 0 and sampled[-1] == eot_id
    context = tail[k + 1 :] if ends_with_eot else tail[k:]
    rendered = tail[: len(tail) - len(context)]  # the canonical rendering of a_m we replace
    exact = len(rendered) == len(sampled) and rendered == sampled
    return Boundary(context=context, exact=exact)


def splice_exact(
    prev_prompt_len: int, sampled: list[int], next_prompt: list[int], eot_id: int
) -> Boundary | None:
    """The exact boundary: `next_prompt` starts with p_m || a_m (checked by the caller).
    None when t_m = a_m || rest holds no end-of-turn id (unsafe)."""
    rest = next_prompt[prev_prompt_len + len(sampled) :]
    if eot_id not in rest and eot_id not in sampled:
        return None
    return Boundary(context=rest, exact=True)
