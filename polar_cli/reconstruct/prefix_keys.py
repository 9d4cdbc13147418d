"""Chain keys and how a new prompt is matched against them without re-scanning prefixes.

Owns: block-wise prefix hashes of token sequences, `ChainKey` (a chain's key: p_m in polar
mode, p_m || a_m in exact mode) and the two checks a prompt goes through: a constant-size
filter (`ChainKey.may_prefix`) and the full comparison of the one candidate that wins
(`ChainKey.is_prefix_of`).
Out of scope: which candidate wins (reconstruct/builder.py).

Why: sessions have hundreds of calls with prompts of tens of thousands of tokens and may keep
several chains open (parent and child agents, compacted histories). Comparing every prompt
with every open chain's key token by token is quadratic. Instead each prompt is hashed once in
blocks of HASH_BLOCK_TOKENS (hashes[j] identifies prompt[: j * B]); a key stores the hash of its
whole blocks and its last, partial block. Checking a key is then one hash comparison plus at
most B token comparisons, and only the winner is compared in full (so a hash collision can
never merge the wrong calls). Total work stays linear in the number of tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HASH_BLOCK_TOKENS = 128  # tokens per hashed block (the per-key filter compares < this many)


def prefix_block_hashes(tokens: Sequence[int]) -> list[int]:
    """hashes[j] identifies tokens[: j * HASH_BLOCK_TOKENS] (hashes[0] is the empty prefix)."""
    hashes = [0]
    _extend_hashes(hashes, tokens)
    return hashes


def _extend_hashes(hashes: list[int], tokens: Sequence[int]) -> int:
    """Append the hashes of `tokens`' whole blocks, chained on hashes[-1]; return where the
    trailing partial block starts."""
    b = HASH_BLOCK_TOKENS
    h = hashes[-1]
    end = len(tokens) - len(tokens) % b
    for start in range(0, end, b):
        h = hash((h, tuple(tokens[start : start + b])))
        hashes.append(h)
    return end


@dataclass(frozen=True)
class ChainKey:
    """The token sequence parts[0] || parts[1] || ..., as stored for matching."""

    parts: tuple[list[int], ...]
    length: int
    block_hash: int  # identifies the key's first (length // B) * B tokens
    tail: list[int]  # the key's last length % B tokens

    @classmethod
    def of_prompt(cls, prompt: list[int], hashes: list[int]) -> ChainKey:
        """The key p_m, given `hashes = prefix_block_hashes(prompt)` (no rehashing)."""
        whole = len(prompt) // HASH_BLOCK_TOKENS
        return cls(
            parts=(prompt,),
            length=len(prompt),
            block_hash=hashes[whole],
            tail=prompt[whole * HASH_BLOCK_TOKENS :],
        )

    @classmethod
    def of_prompt_and_response(
        cls, prompt: list[int], hashes: list[int], response: list[int]
    ) -> ChainKey:
        """The key p_m || a_m: only the prompt's last partial block and the response are
        hashed, so the cost is O(B + |a_m|)."""
        whole = len(prompt) // HASH_BLOCK_TOKENS
        rest = prompt[whole * HASH_BLOCK_TOKENS :] + response
        chained = [hashes[whole]]
        tail_start = _extend_hashes(chained, rest)
        return cls(
            parts=(prompt, response),
            length=len(prompt) + len(response),
            block_hash=chained[-1],
            tail=rest[tail_start:],
        )

    def may_prefix(self, prompt: list[int], hashes: list[int]) -> bool:
        """Cheap filter: False means this key is certainly not a prefix of `prompt`
        (`hashes = prefix_block_hashes(prompt)`). True must be confirmed by `is_prefix_of`."""
        if self.length > len(prompt):
            return False
        whole = self.length // HASH_BLOCK_TOKENS
        if hashes[whole] != self.block_hash:
            return False
        start = whole * HASH_BLOCK_TOKENS
        return prompt[start : self.length] == self.tail

    def is_prefix_of(self, prompt: list[int]) -> bool:
        """Full comparison: `prompt` starts with the key."""
        if self.length > len(prompt):
            return False
        pos = 0
        for part in self.parts:
            if prompt[pos : pos + len(part)] != part:
                return False
            pos += len(part)
        return True
