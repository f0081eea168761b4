import math
import unittest

import torch

from reigntrain.objectives import cosine3_batch, infonce_batch, three_way_cosine


class ObjectiveTest(unittest.TestCase):
    def test_three_way_cosine_by_hand(self):
        x = torch.tensor([[2.0, 0.0]] * 4)
        y = torch.tensor([[3.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [1.0, 1.0]])  # c = 1, 0, -1, 1/sqrt(2)
        r = 1 / math.sqrt(2)
        want = {  # s: per-pair losses for the four c values, lambda = 0.5
            1: [0.0, 1.0, 2.0, 1 - r],
            0: [0.5, 0.5, 1.0, 0.5 * (1 - r) + 0.5 * r],
            -1: [1.0, 0.0, 0.0, r],
        }
        for s, w in want.items():
            got = three_way_cosine(x, y, torch.full((4,), s), lam=0.5)
            torch.testing.assert_close(got, torch.tensor(w), atol=1e-6, rtol=0, msg=f"s={s}")
        # lambda weights the partial branch: lambda=1 makes it the positive loss.
        got = three_way_cosine(x, y, torch.zeros(4, dtype=torch.long), lam=1.0)
        torch.testing.assert_close(got, torch.tensor(want[1]), atol=1e-6, rtol=0)

    def test_released_batch_has_360_pairs_and_the_mean_loss(self):
        torch.manual_seed(1)
        b = 18
        a, p = torch.randn(b, 5), torch.randn(b, 5)
        partials = torch.randn(2 * b, 5)
        owner = torch.arange(b).repeat_interleave(2)
        neg = ~torch.eye(b, dtype=torch.bool)
        loss, pairs = cosine3_batch(a, p, partials, owner, neg, lam=0.5)
        self.assertEqual(pairs, 360)
        cos = torch.nn.functional.cosine_similarity
        terms = []
        for i in range(b):
            terms.append(1 - cos(a[i], p[i], dim=0))
            for r in (2 * i, 2 * i + 1):
                c = cos(a[i], partials[r], dim=0)
                terms.append(0.5 * (1 - c) + 0.5 * c.clamp(min=0))
            for shift in range(1, b):
                terms.append(cos(a[i], p[(i + shift) % b], dim=0).clamp(min=0))
        torch.testing.assert_close(loss, torch.stack(terms).mean(), atol=1e-6, rtol=0)

    def test_masked_negatives_are_left_out(self):
        a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
        p = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # each positive is also the other's: c = 1
        neg = torch.zeros(2, 2, dtype=torch.bool)
        loss, pairs = cosine3_batch(a, p, torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), neg)
        self.assertEqual((pairs, loss.item()), (2, 0.0))
        neg = ~torch.eye(2, dtype=torch.bool)
        loss, pairs = cosine3_batch(a, p, torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), neg)
        self.assertEqual(pairs, 4)
        self.assertAlmostEqual(loss.item(), 0.5, places=6)

    def test_infonce_by_hand(self):
        a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        p = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
        tau = 0.5
        neg = ~torch.eye(2, dtype=torch.bool)
        loss, pairs = infonce_batch(a, p, neg, tau)
        # anchor 0: logits (1, 1)/tau, target 0 -> log 2; anchor 1: logits (0, 0) -> log 2.
        self.assertEqual(pairs, 4)
        self.assertAlmostEqual(loss.item(), math.log(2), places=6)
        # With the negatives masked each anchor has only its positive: loss 0.
        loss, _ = infonce_batch(a, p, torch.zeros(2, 2, dtype=torch.bool), tau)
        self.assertAlmostEqual(loss.item(), 0.0, places=6)
        with self.assertRaises(ValueError):
            infonce_batch(a, p, neg, 0.0)


if __name__ == "__main__":
    unittest.main()
