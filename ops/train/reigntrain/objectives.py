"""Training objectives (REFERENCE-IMPLEMENTATION.md section 6, paper section 4.2 / appendix G-H).

A batch holds B anchors; anchor i has one positive p_i, its partials (distractors) and, as
negatives, the other anchors' positives ("shifting the positives" by 1..B-1). `neg_mask[i, j]`
says whether p_j may serve as a negative of anchor i: never for j == i, and never when p_j is
itself judged relevant to anchor i (a false negative would push apart what qrels call related).
"""
import torch
from torch.nn import functional as F


def three_way_cosine(x, y, s, lam=0.5):
    """Per-pair loss of the released recipe, c = cos(x, y), c+ = max(0, c):
    s=1: 1-c;  s=0: lam*(1-c) + (1-lam)*c+;  s=-1: c+."""
    c = F.cosine_similarity(x, y, dim=-1, eps=1e-8)
    cp = c.clamp(min=0)
    pos, part = 1 - c, lam * (1 - c) + (1 - lam) * cp
    return torch.where(s == 1, pos, torch.where(s == 0, part, cp))


def cosine3_batch(anchors, positives, partials, partial_owner, neg_mask, lam=0.5):
    """Mean three-way cosine loss over every pair of the batch: B positive pairs, one partial
    pair per row of `partials` (owned by anchor partial_owner[r]) and one negative pair per true
    entry of neg_mask. With B=18 and two partials each that is 18 + 36 + 18*17 = 360 pairs.
    Returns (loss, number of pairs)."""
    b = anchors.shape[0]
    ii, jj = neg_mask.nonzero(as_tuple=True)
    x = torch.cat([anchors, anchors[partial_owner], anchors[ii]])
    y = torch.cat([positives, partials, positives[jj]])
    s = torch.cat([
        torch.ones(b, dtype=torch.long, device=x.device),
        torch.zeros(len(partial_owner), dtype=torch.long, device=x.device),
        torch.full((len(ii),), -1, dtype=torch.long, device=x.device),
    ])
    return three_way_cosine(x, y, s, lam).mean(), len(s)


def infonce_batch(anchors, positives, neg_mask, tau=0.07):
    """InfoNCE over the in-batch positives (partials unused, the paper's alpha=0 arm): anchor i
    must pick p_i among p_i and its allowed negatives. Returns (loss, number of pairs)."""
    if tau <= 0:
        raise ValueError(f"tau {tau}: must be positive")
    b = anchors.shape[0]
    logits = F.normalize(anchors, dim=-1) @ F.normalize(positives, dim=-1).T / tau
    eye = torch.eye(b, dtype=torch.bool, device=anchors.device)
    logits = logits.masked_fill(~(neg_mask | eye), float("-inf"))
    target = torch.arange(b, device=anchors.device)
    return F.cross_entropy(logits, target), int((neg_mask | eye).sum())
